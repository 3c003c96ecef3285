"""Base previews (BASE_PREVIEWS, flows/base_previews.py): looked at when the service starts and then every
RECONCILE_INTERVAL_MINUTES (daily when the reconcile is off: pushes then reach a base preview only by that look),
each correction queued through the inbox once (its delivery id names the branch head) and only for a base preview
with nothing queued or running."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.events.periodic import EventScheduler
from orchestrator.state.records import PullRequestEvent

log = logging.getLogger("orchestrator.events.base_previews")
WHEN_RECONCILE_IS_OFF = 24 * 3600.0


class BasePreviewScheduler(EventScheduler):
    name = "base previews"
    check_at_start = True

    def __init__(self, due: Callable[[], list[tuple[PullRequestEvent, str]]], inbox: Inbox, dispatcher: Dispatcher,
                 interval: float) -> None:
        super().__init__(inbox, dispatcher, interval if interval > 0 else WHEN_RECONCILE_IS_OFF, log)
        self._due = due

    async def check(self) -> int:
        """Queue what the base previews need; returns how many events were newly queued."""
        return len(await self.queue(await asyncio.to_thread(self._due), only_if_idle=True))
