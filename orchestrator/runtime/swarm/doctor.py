"""The swarm runtime's own lines of `doctor` (SwarmRuntime.checks): this engine is a manager, the nodes are
ready, the registry answers and only to the service's credentials, the nodes' own engines (SWARM_NODE_ENGINES)
answer, every node's engine can pull from the registry, and when the registry's garbage collection last ran."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.plugin_api import CommandFailed
from orchestrator.plugin_api.checks import Check, run_safely
from orchestrator.runtime.swarm.cli import SwarmCli
from orchestrator.runtime.swarm.gc import last_run
from orchestrator.runtime.swarm.registry import Registry


def swarm_checks(cli: SwarmCli, registry: Registry, gc_command: list[str], gc_interval: float,
                 state_dir: Path | None) -> list[Check]:
    """Every check, in parallel (each asks the engines or the registry), in a fixed order."""
    probes: list[Callable[[], Check]] = [
        lambda: _manager(cli), lambda: _nodes(cli), lambda: _registry(registry), lambda: _registry_access(registry),
        lambda: _node_engines(cli),
        lambda: _registry_from_nodes(cli, registry), lambda: _garbage_collection(gc_command, gc_interval, state_dir)]
    with ThreadPoolExecutor(max_workers=len(probes)) as pool:
        return list(pool.map(lambda probe: run_safely(probe, "swarm check"), probes))


def _garbage_collection(gc_command: list[str], gc_interval: float, state_dir: Path | None) -> Check:
    name = "registry garbage collection (SWARM_REGISTRY_GC_COMMAND)"
    if not gc_command or gc_interval == 0 or state_dir is None:
        return Check(name, False, "not run by the service: closed previews' tags are deleted, their layers stay",
                     "set SWARM_REGISTRY_GC_COMMAND to the registry's garbage-collect command (docs/scaling.md), "
                     "or run it on the registry's host on a schedule of yours")
    every = f"every {gc_interval / 3600:g} h"
    run = last_run(state_dir)
    if run is None:
        return Check(name, True, f"{every}; not run yet")
    ago = (datetime.now(UTC) - run.at).total_seconds() / 3600
    when = f"last ran {run.at.isoformat(timespec='seconds')} ({ago:.1f} h ago, {run.seconds:.1f} s)"
    if not run.ok:
        return Check(name, False, f"{every}; {when} and failed: {run.detail}",
                     "run the command by hand on the registry's host and fix what it says")
    return Check(name, True, f"{every}; {when}")


def _manager(cli: SwarmCli) -> Check:
    name = "this Docker engine is a swarm manager (RUNTIME=swarm)"
    try:
        info = cli.swarm_info()
    except CommandFailed as exc:
        return Check(name, False, exc.tail(1), "start the Docker engine", hard=True)
    state = info.get("LocalNodeState", "inactive")
    if state != "active":
        return Check(name, False, f"swarm {state}", "docker swarm init on this host, then join the nodes "
                     "(docs/scaling.md)", hard=True)
    if not info.get("ControlAvailable"):
        return Check(name, False, "a worker: stacks are deployed from a manager",
                     "run the service on a manager, or point DOCKER_HOST at one", hard=True)
    return Check(name, True, f"{info.get('Name', '')}: {info.get('Managers', 0)} manager(s), "
                             f"{info.get('Nodes', 0)} node(s)")


def _nodes(cli: SwarmCli) -> Check:
    try:
        nodes = cli.nodes()
    except CommandFailed as exc:
        return Check("swarm nodes ready", False, exc.tail(1), "run doctor on a manager")
    ready = [node for node in nodes if node.usable]
    workers = [node for node in ready if not node.manager]
    others = [f"{node.hostname} {node.state}/{node.availability}" for node in nodes if not node.usable]
    detail = f"{len(ready)} of {len(nodes)} ready and active ({len(workers)} workers)"
    if others:
        detail += "; " + ", ".join(others)
    return Check("swarm nodes ready", bool(ready) and not others, detail,
                 "bring the node back (its previews fail until they are redeployed elsewhere), or "
                 "`docker node rm` it" if ready else "join a node: docker swarm join-token worker")


def _registry(registry: Registry) -> Check:
    name = f"registry {registry.address} answers (SWARM_REGISTRY)"
    problem = registry.ping()
    return Check(name, not problem, problem or "v2 API",
                 "start the registry (scripts/prepare-host can start Debian's docker-registry), check "
                 "SWARM_REGISTRY_SCHEME; every node must be able to pull from it (insecure-registries for "
                 "plain HTTP)")


def _registry_access(registry: Registry) -> Check:
    """A preview's containers reach the registry's address like the nodes do: only credentials keep them from
    listing, pulling, pushing over and deleting every preview's images."""
    name = "the registry refuses anonymous access (SWARM_REGISTRY_USER)"
    setup = ("give the registry htpasswd authentication (scripts/prepare-host does, docs/scaling.md) and set "
             "SWARM_REGISTRY_USER and SWARM_REGISTRY_PASSWORD")
    anonymous, with_credentials = registry.access()
    user = registry.credentials[0] if registry.credentials else ""
    if anonymous != 401:
        return Check(name, False, f"a request without credentials gets HTTP {anonymous}: any preview's code "
                                  "can list, pull, replace and delete every preview's images", setup)
    if with_credentials is None:
        return Check(name, False, "it asks for credentials, but SWARM_REGISTRY_USER is not set: pushes fail",
                     setup)
    if with_credentials != 200:
        return Check(name, False, f"SWARM_REGISTRY_USER's credentials get HTTP {with_credentials}",
                     "set the user and password the registry's htpasswd file holds")
    return Check(name, True, f"HTTP 401 without credentials, 200 with {user}'s")


def _node_engines(cli: SwarmCli) -> Check:
    name = "the nodes' own engines answer (SWARM_NODE_ENGINES)"
    engines = cli.engines
    try:
        nodes = cli.nodes()
        manager = cli.swarm_info().get("Name", "")
    except CommandFailed as exc:
        return Check(name, False, exc.tail(1))
    missing = [node.hostname for node in nodes if cli.engine(node.hostname, manager) is None]
    silent = []
    for hostname, host in engines.items():
        try:
            cli.docker(["version", "--format", "{{.Server.Version}}"], engine=host, timeout=15)
        except CommandFailed:
            silent.append(hostname)
    problems = [f"no engine for {', '.join(missing)}"] if missing else []
    problems += [f"{', '.join(silent)} not answering"] if silent else []
    return Check(name, not problems, "; ".join(problems) or f"{len(engines)} configured",
                 "add hostname=ssh://user@host (or tcp://) to SWARM_NODE_ENGINES: without it a closed preview's "
                 "volume stays on that node")


# A name no registry holds: the engine's answer tells whether it reached the registry ("manifest unknown",
# "not found"; a registry with credentials answers an engine without them "no basic auth credentials") or not
# (refused, timed out, HTTPS asked of a plain-HTTP registry, ...). Nothing is pulled.
PROBE_IMAGE = "preview-orchestrator/doctor-probe:absent"
REACHED = ("manifest unknown", "not found", "no basic auth credentials", "unauthorized")


def _registry_from_nodes(cli: SwarmCli, registry: Registry) -> Check:
    """Each ready node's own engine asks the registry for an image that is not there — what a task's pull does,
    with that node's DNS, routes and insecure-registries — so a node that cannot pull is named before a preview
    is placed on it."""
    name = f"every node pulls from {registry.address} (SWARM_REGISTRY)"
    try:
        nodes = [node for node in cli.nodes() if node.usable]
        manager = cli.swarm_info().get("Name", "")
    except CommandFailed as exc:
        return Check(name, False, exc.tail(1))
    reached, failed, unchecked = [], [], []
    for node in nodes:
        engine = cli.engine(node.hostname, manager)
        if engine is None:
            unchecked.append(node.hostname)
            continue
        try:
            cli.docker(["pull", "--quiet", f"{registry.address}/{PROBE_IMAGE}"], engine=engine or None, timeout=30)
            reached.append(node.hostname)  # someone pushed the probe's name: reached all the same
        except CommandFailed as exc:
            answer = exc.output.lower()
            if any(word in answer for word in REACHED) and "connection refused" not in answer:
                reached.append(node.hostname)
            else:
                failed.append(f"{node.hostname}: {exc.tail(1).strip() or 'timed out'}")
    problems = [*failed, *(f"{hostname} not checked (no engine in SWARM_NODE_ENGINES)" for hostname in unchecked)]
    detail = f"{len(reached)} of {len(nodes)} nodes reach it" + (f"; {'; '.join(problems)}" if problems else "")
    return Check(name, not problems and bool(reached), detail,
                 "on each node named: the registry's address must resolve and route there, and a plain-HTTP "
                 "registry must be in that engine's insecure-registries (daemon.json); add the node to "
                 "SWARM_NODE_ENGINES so it can be checked" if problems else "")
