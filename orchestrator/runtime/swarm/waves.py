"""The order a swarm preview's services start in: a swarm has no depends_on, so the stack is deployed in waves —
services grouped by the depth of their depends_on chain, each wave once what it needs of the last is running (or
has completed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StackPlan:
    document: dict[str, Any]
    waves: list[list[str]]  # services by start order; wave N starts once wave N-1 is up
    awaited: dict[str, str] = field(default_factory=dict)  # service -> "running" or "complete" (what others need)
    notes: list[str] = field(default_factory=list)

    def subset(self, wave: int) -> dict[str, Any]:
        """The stack file with the services of waves 0..`wave` only."""
        wanted = {name for names in self.waves[: wave + 1] for name in names}
        services = {name: spec for name, spec in self.document["services"].items() if name in wanted}
        return {**self.document, "services": services}


def start_waves(services: dict[str, Any]) -> tuple[list[list[str]], dict[str, str]]:
    """Services grouped by how deep their depends_on chain is; what each awaited service must reach."""
    level: dict[str, int] = {}
    awaited: dict[str, str] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name not in level:
            needs = (services.get(name) or {}).get("depends_on") or {}
            deeper = [depth(str(dep), seen | {name}) for dep in needs if dep not in seen and dep in services]
            level[name] = 1 + max(deeper) if deeper else 0
        return level[name]

    for name, service in services.items():
        depth(str(name), frozenset())
        for dep, condition in ((service or {}).get("depends_on") or {}).items():
            wanted = "complete" if (condition or {}).get("condition") == "service_completed_successfully" else "running"
            if awaited.get(str(dep)) != "complete":
                awaited[str(dep)] = wanted
    waves = [sorted(name for name, depth_ in level.items() if depth_ == index)
             for index in range(max(level.values(), default=-1) + 1)]
    return waves, awaited
