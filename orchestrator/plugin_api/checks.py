"""One line of `preview-orchestrator doctor` (and of the start-up checks): ✓ or ✗, what was found, the fix.

The core's checks and a runtime plugin's own (`checks()`, see runtime.py) are the same kind of line: a runtime
brings the checks of what only it knows (a swarm's nodes and registry), and doctor shows them with the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

OK, FAILED = "✓", "✗"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""  # what was found
    fix: str = ""  # what to do when not ok
    hard: bool = False  # a failed hard check stops the service at start-up; the others are warnings

    def line(self) -> str:
        text = f"{OK if self.ok else FAILED} {self.name}"
        if self.detail:
            text += f": {self.detail}"
        if not self.ok and self.fix:
            text += f" — fix: {self.fix}"
        return text


def run_safely(probe: Callable[[], Check], name: str = "check") -> Check:
    """The probe's line; one that breaks is reported as a failed line, never a crash of doctor."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - whatever a probe raises is what the line says
        return Check(name, False, f"could not run ({type(exc).__name__}: {exc})")


def run_all_safely(probe: Callable[[], list[Check]], name: str) -> list[Check]:
    """A plugin's lines (a code host's, a runtime's); checks that break are one failed line named `name`."""
    try:
        return list(probe())
    except Exception as exc:  # noqa: BLE001 - a third party's checks
        return [Check(name, False, f"could not run ({type(exc).__name__}: {exc})")]
