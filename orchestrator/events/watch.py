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
    """Also the registry's garbage collection (SWARM_REGISTRY_GC_INTERVAL_SECONDS), under its own name."""

    name = "runtime watch"

    def __init__(self, check: Callable[[], object], interval: float, name: str | None = None) -> None:
        super().__init__(interval)
        self._check = check
        self.name = name or self.name

    async def check(self) -> object:
        return await asyncio.to_thread(self._check)
