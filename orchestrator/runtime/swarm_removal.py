"""Removing a preview from a swarm, everywhere it left something: the stack (services, its network, configs and
secrets) on the manager; containers, volumes and pulled images on the nodes, through their own engines (only a
node's engine removes its volumes); the images built and tagged on the manager; the registry's tags.

It goes on past failures and returns what is left, in words: the cleanup flow keeps the record (failed) for a
retry while anything is. A node that is down keeps what it holds until it is back; it is named then.
"""

from __future__ import annotations

import time

from orchestrator.adapters.commands import CommandFailed
from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.runtime.swarm_cli import STACK_LABEL, SwarmCli
from orchestrator.runtime.swarm_registry import Registry, RegistryError
from orchestrator.runtime.swarm_stack import FORMER_LABEL, NODE_LABEL

SETTLE_SECONDS = 60.0  # a removed stack's tasks stop and detach from the network within this


def remove_deployment(cli: SwarmCli, registry: Registry, deployment_id: str) -> list[str]:
    problems: list[str] = []
    held: set[str] = set()  # nodes that hold (or held) the preview: what stays there must be reported
    try:
        for service in cli.services(f"{STACK_LABEL}={deployment_id}"):
            labels = service["Spec"].get("Labels") or {}
            held |= {labels.get(NODE_LABEL, ""), *labels.get(FORMER_LABEL, "").split(",")} - {""}
        if held or cli.networks(f"{STACK_LABEL}={deployment_id}"):
            cli.remove_stack(deployment_id)
    except CommandFailed as exc:
        problems.append(f"stack: {exc.tail(3) or exc}")
    problems += _clear_nodes(cli, registry, deployment_id, held)
    problems += _remove_networks(cli, deployment_id)
    try:  # what `docker compose build` made, and the registry references tagged from it
        for reference in cli.images("", "", label=f"com.docker.compose.project={deployment_id}"):
            cli.docker(["image", "rm", reference], timeout=120)
    except CommandFailed as exc:
        problems.append(f"built image: {exc.tail(2) or exc}")
    try:
        for repository, tags in registry.tags(deployment_id).items():
            for tag in tags:
                registry.delete(repository, tag)
    except RegistryError as exc:
        problems.append(f"registry: {exc}")
    return problems


def _clear_nodes(cli: SwarmCli, registry: Registry, deployment_id: str, held: set[str]) -> list[str]:
    try:
        manager = cli.swarm_info().get("Name", "")
        nodes = cli.nodes()
    except CommandFailed as exc:
        return [f"swarm nodes: {exc.tail(2) or exc}"]
    problems: list[str] = []
    prefix = registry.repository_prefix(deployment_id)
    for node in nodes:
        engine = cli.engine(node.hostname, manager)
        if engine is None or node.state != "ready":
            if node.id in held:
                why = ("SWARM_NODE_ENGINES has no engine for it" if engine is None
                       else f"the node is {node.state}")
                problems.append(f"node {node.hostname}: the preview's volumes stay there ({why})")
            continue
        left = _clear_node(cli, engine, deployment_id, prefix)
        if left:
            problems.append(f"node {node.hostname}: {', '.join(left)} not removed")
    if held - {node.id for node in nodes}:
        problems.append("a node the preview ran on left the swarm: its volumes stay on that machine")
    return problems


def _clear_node(cli: SwarmCli, engine: str, deployment_id: str, prefix: str) -> list[str]:
    """Retried while the node's agent is still stopping the stack's containers (a volume in use stays)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        try:
            left = cli.clear_node(engine, deployment_id, prefix)
        except CommandFailed as exc:
            left = [exc.tail(1) or str(exc)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1.0)


def _remove_networks(cli: SwarmCli, deployment_id: str) -> list[str]:
    """`docker stack rm` removes the network once no task is attached; a network it could not remove yet is
    removed here."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        try:
            networks = cli.networks(f"{DEPLOYMENT_LABEL}={deployment_id}")
            for network in networks:
                cli.docker(["network", "rm", network], timeout=60)
            return []
        except CommandFailed as exc:
            if time.monotonic() > deadline:
                return [f"network: {exc.tail(2) or exc}"]
        time.sleep(1.0)
