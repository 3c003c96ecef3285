"""The runtime watch: every RUNTIME_WATCH_INTERVAL_SECONDS, running previews the runtime reports lost (a swarm
node that left) are marked failed and their pull requests told (flows/reconcile.py `report_lost`).

It runs in a thread of its own beside the dispatcher; the store update that marks a preview failed only
applies while the preview is still `running` at the same `updatedAt`, so a deploy that began meanwhile wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.events.periodic import Periodic


class RuntimeWatch(Periodic):
    name = "runtime watch"

    def __init__(self, check: Callable[[], int], interval: float) -> None:
        super().__init__(interval)
        self._check = check

    async def check(self) -> int:
        return await asyncio.to_thread(self._check)
