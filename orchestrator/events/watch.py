"""The runtime watch: every RUNTIME_WATCH_INTERVAL_SECONDS, running previews the runtime reports lost (a swarm
node that left) are marked failed and their pull requests told (flows/reconcile.py `report_lost`).

It runs in a thread of its own beside the dispatcher; the store update that marks a preview failed only
applies while the preview is still `running` at the same `updatedAt`, so a deploy that began meanwhile wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("orchestrator.events.watch")


class RuntimeWatch:
    def __init__(self, check: Callable[[], int], interval: float) -> None:
        self._check = check
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="runtime-watch")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await asyncio.to_thread(self._check)
            except Exception:
                log.exception("runtime watch failed; trying again later")
