"""Cleanups that could not finish (a swarm node down, an engine that refused) are tried again: every
CLEANUP_RETRY_INTERVAL_SECONDS, a record the cleanup flow left failed with "Cleanup incomplete: …" gets a `closed`
event again, until nothing of the preview is left and the record goes.

The retry goes through the inbox like the TTL's cleanups, serialised with the pull request's other work. It is
queued only for a deployment with no event to run, checked as it is stored (a `closed` would cancel a `reopened`
that a webhook just queued); and the cleanup flow runs a retry only while the record is still one whose cleanup
is incomplete (a `reopened` that came after the retry was queued has deployed the preview again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.events.periodic import EventScheduler
from orchestrator.flows.cleanup import RETRY_PREFIX
from orchestrator.state.records import DeploymentRecord, PullRequestEvent, event_for_record

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
        stamp = int((now or datetime.now(UTC)).timestamp())
        return len(await self.queue([
            (retry_event(record, stamp), f"cleanup retried ({record.error})") for record in records],
            only_if_idle=True))


def retry_event(record: DeploymentRecord, stamp: int) -> PullRequestEvent:
    return event_for_record(record, "closed", f"{RETRY_PREFIX}{record.deploymentId}-{stamp}")
