"""A check the service repeats while it serves (the TTL, the runtime watch, sleep): one asyncio task, started
with the app and stopped before the dispatcher; a check that fails is logged and tried again next time."""

from __future__ import annotations

import asyncio
import logging

from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.state.records import PullRequestEvent

log = logging.getLogger("orchestrator.events.periodic")


class Periodic:
    """Subclasses name themselves and implement `check()`; `check_at_start` runs it once before the first wait."""

    name = "periodic check"
    check_at_start = False

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        if not self.check_at_start:
            await asyncio.sleep(self._interval)
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("%s failed; trying again later", self.name)
            await asyncio.sleep(self._interval)


class EventScheduler(Periodic):
    """A periodic check that queues events (the TTL's cleanups, sleep): each through the inbox, once (its
    delivery id says what it is about), and the dispatcher told when one is new."""

    def __init__(self, inbox: Inbox, dispatcher: Dispatcher, interval: float, logger: logging.Logger) -> None:
        super().__init__(interval)
        self._inbox = inbox
        self._dispatcher = dispatcher
        self._log = logger

    async def queue(self, events: list[tuple[PullRequestEvent, str]],
                    only_if_idle: bool = False) -> list[PullRequestEvent]:
        """Accept each event, logging its message when it is new; returns the ones newly queued.
        `only_if_idle`: Inbox.accept's (an event is queued only for a deployment with nothing to run)."""
        queued = []
        for event, message in events:
            accepted = await asyncio.to_thread(self._inbox.accept, event, only_if_idle)
            if accepted.stored:
                queued.append(event)
                self._log.info("%s", message, extra={"deploymentId": event.deployment_id})
        if queued:
            self._dispatcher.notify()
        return queued
