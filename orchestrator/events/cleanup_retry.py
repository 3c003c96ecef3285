"""Cleanups that could not finish (a swarm node down, an engine that refused) are tried again: every
CLEANUP_RETRY_INTERVAL_SECONDS, a record the cleanup flow left failed with "Cleanup incomplete: …" gets a `closed`
event again, until nothing of the preview is left and the record goes.

The retry goes through the inbox like the TTL's cleanups, serialised with the pull request's other work. A
preview that already has an event to run is skipped (a reopen deploys it; a queued cleanup needs no company).
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

log = logging.getLogger("orchestrator.events.cleanup_retry")


class CleanupRetryScheduler(EventScheduler):
    name = "cleanup retry"

    def __init__(self, unfinished: Callable[[], list[DeploymentRecord]], inbox: Inbox, dispatcher: Dispatcher,
                 interval: float) -> None:
        super().__init__(inbox, dispatcher, interval, log)
        self._unfinished = unfinished

    async def check(self, now: datetime | None = None) -> int:
        """Queue a cleanup again for every unfinished one without an event to run; returns how many."""
        records = await asyncio.to_thread(self._unfinished)
        waiting = await asyncio.to_thread(self._inbox.open_deployments)
        stamp = int((now or datetime.now(UTC)).timestamp())
        return await self.queue([
            (event_for_record(record, "closed", f"cleanup-retry-{record.deploymentId}-{stamp}"),
             f"cleanup retried ({record.error})") for record in records if record.deploymentId not in waiting])
