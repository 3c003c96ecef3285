"""The compose runtime's wait for a preview's dependencies (its database, extra services) before the app starts, on
a wake, an update and a new preview whose database starts from a copy of a seed: their own healthchecks run at once
and every READY_PAUSE seconds (`docker exec` of the test), where compose would wait for Docker's schedule of them
(the database's first run 2 s after its start), which a reviewer waiting for the page would feel."""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.plugin_api import DeploymentLog, FlowControl, RuntimeFailure
from orchestrator.runtime.compose_cli import Container, DockerResources

READY_PAUSE = 0.1  # between two runs of a dependency's healthcheck
LOOK_SECONDS = 1.0  # how often a dependency being awaited is checked for having exited
READY_TIMEOUT = 120.0


def await_healthchecks(docker: DockerResources, problem: Callable[[tuple[str, ...]], str | None],
                       containers: list[Container], log: DeploymentLog, control: FlowControl,
                       give_up: Callable[[], bool] = lambda: False) -> bool:
    """Until the healthcheck of every container that has one passes (or Docker says it is healthy); one that exits
    or restarts meanwhile fails at once, with what `problem` says of the services still awaited. `give_up`: the
    wait ends quietly once it says so (a wait beside a build that failed): False."""
    if passed := ", ".join(c.service for c in containers if c.healthcheck and c.healthy):  # nothing to probe
        log.note(f"{passed}: healthy (Docker's own healthcheck since the last start)")
    waiting = [c for c in containers if c.healthcheck and not c.healthy]
    checked = ", ".join(c.service for c in waiting)
    started, runs = time.monotonic(), 0
    # The first look LOOK_SECONDS after the start: a dependency just started has rarely gone already, and a look
    # (docker ps and inspect: 0.1-0.3 s on an engine with many containers) would hold back the next round; a
    # wake whose database needed a second round took 0.4-0.5 s for it instead of 0.3 s at 500 previews.
    looked = started
    while waiting := [c for c in waiting if not docker.passes_healthcheck(c, control)]:
        runs += 1
        # Every LOOK_SECONDS (inspecting costs as much as a probe), and only the awaited ones: the app container of
        # a sleeping or failed preview is stopped meanwhile.
        if time.monotonic() - looked >= LOOK_SECONDS:
            looked = time.monotonic()
            if (found := problem(tuple(c.service for c in waiting))) is not None:
                raise RuntimeFailure("Containers failed to start", found)
        if time.monotonic() - started > READY_TIMEOUT:
            names = ", ".join(c.service for c in waiting)
            raise RuntimeFailure("Containers failed to start", f"{names}: not healthy after {READY_TIMEOUT:.0f}s")
        control.wait(READY_PAUSE)
        control.check()
        if give_up():
            log.note(f"{', '.join(c.service for c in waiting)}: no longer awaited (the build failed)")
            return False
    if checked:
        log.note(f"healthcheck of {checked} passes ({time.monotonic() - started:.2f}s, {runs + 1} round"
                 f"{'s' if runs else ''})")
    return True
