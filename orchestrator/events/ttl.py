"""The time-to-live: previews whose last deploy or update is older than CLEANUP_TTL_DAYS are cleaned up.

Expiry goes through the inbox as a `closed` event, so it is serialised with the pull request's other work;
its delivery id includes the record's `updatedAt`, so one expiry is queued once however often we look.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.events.periodic import EventScheduler
from orchestrator.state.records import DeploymentRecord, event_for_record

log = logging.getLogger("orchestrator.events.ttl")


class TtlScheduler(EventScheduler):
    name = "TTL check"
    check_at_start = True

    def __init__(self, expired: Callable[[datetime], list[DeploymentRecord]], inbox: Inbox,
                 dispatcher: Dispatcher, interval: float) -> None:
        super().__init__(inbox, dispatcher, interval, log)
        self._expired = expired

    async def check(self, now: datetime | None = None) -> int:
        """Queue a cleanup for every expired preview; returns how many were newly queued."""
        expired = await asyncio.to_thread(self._expired, now or datetime.now(UTC))
        return len(await self.queue([
            (event_for_record(record, "closed", f"ttl-{record.deploymentId}-{int(record.updatedAt.timestamp())}"),
             "TTL expired; cleanup queued") for record in expired]))
