"""The `swarm` runtime (RUNTIME=swarm, docs/scaling.md), a built-in plugin written as a third party would write
one: `po_runtimes` and `po_runtime` (runtime.py) build a SwarmRuntime, which brings its own doctor lines
(doctor.py). The rest is the runtime's own: the Docker CLI against the swarm (cli.py), the stack file (stack.py),
tasks and roll-outs (tasks.py), removal from every node (removal.py), the registry (registry.py) and its garbage
collection (gc.py)."""

from orchestrator.runtime.swarm.runtime import SwarmRuntime, po_runtime, po_runtimes

__all__ = ["SwarmRuntime", "po_runtime", "po_runtimes"]
