"""Sleep (PREVIEW_IDLE_MINUTES): every SLEEP_CHECK_INTERVAL_SECONDS, running previews no request reached for that
long get a `sleep` event; a request to a sleeping preview gets it a `wake` event (http/resources/preview_wake.py).

Both go through the inbox, so they are serialised with the pull request's other work (flows/sleep.py does the
work). Their delivery ids name what they are about, so each is queued once however often it is asked for: a
sleep by the preview's last use, a wake by the moment it went to sleep — every request that meets the same
sleeping preview waits for the same wake.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Accepted, Inbox
from orchestrator.events.periodic import EventScheduler
from orchestrator.state.records import DeploymentRecord, PullRequestEvent, event_for_record

log = logging.getLogger("orchestrator.events.sleep")

IdlePreviews = Callable[[datetime], list[tuple[DeploymentRecord, datetime]]]


def sleep_event(record: DeploymentRecord, last_use: datetime) -> PullRequestEvent:
    return event_for_record(record, "sleep", f"sleep-{record.deploymentId}-{int(last_use.timestamp() * 1000)}")


def wake_event(record: DeploymentRecord) -> PullRequestEvent:
    slept = record.sleptAt or record.updatedAt
    return event_for_record(record, "wake", f"wake-{record.deploymentId}-{int(slept.timestamp() * 1000)}")


def request_wake(inbox: Inbox, record: DeploymentRecord) -> Accepted:
    """Queue the wake of a sleeping preview (or find the one already queued for this sleep)."""
    accepted = inbox.accept(wake_event(record))
    if not accepted.duplicate:
        log.info("wake queued", extra={"deploymentId": record.deploymentId})
    return accepted


class SleepScheduler(EventScheduler):
    name = "sleep check"

    def __init__(self, idle: IdlePreviews, inbox: Inbox, dispatcher: Dispatcher, interval: float) -> None:
        super().__init__(inbox, dispatcher, interval, log)
        self._idle = idle

    async def check(self, now: datetime | None = None) -> int:
        """Queue a sleep for every idle preview; returns how many were newly queued."""
        idle = await asyncio.to_thread(self._idle, now or datetime.now(UTC))
        return len(await self.queue([
            (sleep_event(record, last_use), f"idle since {last_use.isoformat(timespec='seconds')}; sleep queued")
            for record, last_use in idle]))
