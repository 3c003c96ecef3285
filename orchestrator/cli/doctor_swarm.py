"""`doctor`'s checks of a Docker Swarm (RUNTIME=swarm): this engine is a manager, the nodes are ready, the
registry answers, and the nodes' own engines (SWARM_NODE_ENGINES) answer."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.commands import CommandFailed
from orchestrator.adapters.host_env import HostEnv
from orchestrator.cli.doctor import Check
from orchestrator.runtime.swarm_cli import SwarmCli
from orchestrator.runtime.swarm_registry import Registry
from orchestrator.settings import Settings


def swarm_probes(settings: Settings, env: HostEnv) -> list[Callable[[], Check]]:
    cli = SwarmCli(env, settings.swarm_node_engines, timeout=30)
    registry = Registry(settings.swarm_registry, settings.swarm_registry_scheme)
    return [lambda: _manager(cli), lambda: _nodes(cli), lambda: _registry(registry),
            lambda: _node_engines(cli, settings.swarm_node_engines)]


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


def _node_engines(cli: SwarmCli, engines: dict[str, str]) -> Check:
    name = "the nodes' own engines answer (SWARM_NODE_ENGINES)"
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
