"""Host ports for a preview's app and db.

Rule (the spec gives two statements; this is the one we keep): each new deployment gets the lowest free port
of the app pool 8000–8999 and of the db pool 9000–9999. The pools do not overlap, so an app port never equals
a db port, and "8000 + PR number" collisions (PR 1001's app = PR 1's db) cannot happen. A port is free when no
allocation in the store holds it, no running container publishes it, and it can be bound on the host.
Ports are kept across updates and released on cleanup. A service routed besides the app (x-preview) gets a port
of the app pool too, the first time a deploy renders it (`routed_ports`). As the spec's error table says, a
pull-request number above 56,000 fails with `Port allocation out of range`, and so does an exhausted pool.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable

from orchestrator.state.records import PortAllocation

APP_POOL = range(8000, 9000)
DB_POOL = range(9000, 10000)
MAX_PR_NUMBER = 56_000
OUT_OF_RANGE = "Port allocation out of range"


class PortAllocationError(Exception):
    pass


def host_port_free(port: int) -> bool:
    for address in ("127.0.0.1", "0.0.0.0"):  # noqa: S104 - probing, not serving
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, port))
            except OSError:
                return False
    return True


def allocate(pr_number: int, taken: Iterable[PortAllocation], in_use: set[int],
             is_free: Callable[[int], bool] = host_port_free) -> PortAllocation:
    if pr_number > MAX_PR_NUMBER:
        raise PortAllocationError(OUT_OF_RANGE)
    busy = held_ports(taken) | in_use
    app = next((p for p in APP_POOL if p not in busy and is_free(p)), None)
    db = next((p for p in DB_POOL if p not in busy and is_free(p)), None)
    if app is None or db is None:
        raise PortAllocationError(OUT_OF_RANGE)
    return PortAllocation(exposedAppPort=app, exposedDbPort=db)


def held_ports(taken: Iterable[PortAllocation]) -> set[int]:
    return {port for allocation in taken for port in allocation.ports()}


def routed_ports(current: PortAllocation, routes: Iterable[str], taken: Iterable[PortAllocation], in_use: set[int],
                 is_free: Callable[[int], bool] = host_port_free) -> PortAllocation:
    """`current` with a port of the app pool for each route in `routes`: a route keeps the port it has, a new one
    gets the lowest free port, a route no longer asked for gives its port back."""
    wanted = list(routes)
    kept = {name: port for name, port in current.routedPorts.items() if name in wanted}
    busy = held_ports(taken) | in_use | {current.exposedAppPort, current.exposedDbPort, *kept.values()}
    for name in wanted:
        if name in kept:
            continue
        port = next((p for p in APP_POOL if p not in busy and is_free(p)), None)
        if port is None:
            raise PortAllocationError(OUT_OF_RANGE)
        kept[name] = port
        busy.add(port)
    return current.model_copy(update={"routedPorts": kept})
