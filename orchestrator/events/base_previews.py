"""Looks that keep previews in step with what no pull request's webhook says, each queued through the inbox once
and only for a preview with nothing queued or running: the base previews (BASE_PREVIEWS, flows/base_previews.py)
and the previews whose links resolve elsewhere now (flows/links.py). Both run when the service starts and then
every RECONCILE_INTERVAL_MINUTES (daily when the reconcile is off: a push then reaches a base preview only by its
webhook or that look)."""

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


class LookScheduler(EventScheduler):
    check_at_start = True

    def __init__(self, name: str, due: Callable[[], list[tuple[PullRequestEvent, str]]], inbox: Inbox,
                 dispatcher: Dispatcher, interval: float) -> None:
        super().__init__(inbox, dispatcher, interval if interval > 0 else WHEN_RECONCILE_IS_OFF, log)
        self.name = name
        self._due = due

    async def check(self) -> int:
        """Queue what the look finds; returns how many events were newly queued."""
        return len(await self.queue(await asyncio.to_thread(self._due), only_if_idle=True))
