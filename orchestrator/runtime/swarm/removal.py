"""Removing a preview from a swarm, everywhere it left something: the stack (services, its network, configs and
secrets) on the manager; containers, volumes and pulled images on the nodes, through their own engines (only a
node's engine removes its volumes); the images built and tagged on the manager; the registry's tags.

It goes on past failures and returns what is left, in words: the cleanup flow keeps the record (failed) and tries
again (events/cleanup_retry.py) while anything is. A node the preview ran on that is down (or whose engine does
not answer) keeps what it holds until it is back: the stack's services then stay, scaled to zero, because their
labels are what says which nodes hold the preview's volumes — removed, a retry would find nothing to wait for and
forget the record while the volumes stay. A node that left the swarm for good (`docker node rm`) is no longer the
swarm's: what it held is logged, and does not keep the record.
"""

from __future__ import annotations

import logging
import time

from orchestrator.plugin_api import DEPLOYMENT_LABEL, CommandFailed
from orchestrator.plugin_api.types import BUILT_IMAGES
from orchestrator.runtime.swarm.cli import STACK_LABEL, SwarmCli, SwarmNode
from orchestrator.runtime.swarm.registry import Registry, RegistryError
from orchestrator.runtime.swarm.stack import FORMER_LABEL, NODE_LABEL

SETTLE_SECONDS = 60.0  # a removed stack's tasks stop and detach from the network within this
log = logging.getLogger("orchestrator.runtime.swarm")


def remove_deployment(cli: SwarmCli, registry: Registry, deployment_id: str) -> list[str]:
    """Scaled to zero first (nothing restarts while the nodes are cleared), then every node cleared, and only then
    the stack removed: its services' labels name the nodes that hold the preview, so they stay until those are
    clear — a retry needs them."""
    try:
        services = cli.stack_services(deployment_id)
        manager = cli.swarm_info().get("Name", "")
        nodes = cli.nodes()
    except CommandFailed as exc:
        return [f"swarm: {exc.tail(2) or exc}"]
    held: set[str] = set()  # nodes that hold (or held) the preview: what stays there must be reported
    volumes: set[str] = set()  # the named volumes its services mount: what a node that is down keeps
    for service in services:
        labels = service["Spec"].get("Labels") or {}
        held |= {labels.get(NODE_LABEL, ""), *labels.get(FORMER_LABEL, "").split(",")} - {""}
        mounts = ((service["Spec"].get("TaskTemplate") or {}).get("ContainerSpec") or {}).get("Mounts") or []
        volumes |= {mount.get("Source", "") for mount in mounts if mount.get("Type") == "volume"} - {""}
    for node_id in held - {node.id for node in nodes}:
        log.warning("node %s, which ran the preview, left the swarm: its volumes stay on that machine", node_id,
                    extra={"deploymentId": deployment_id})
    # Without services nothing says which nodes held the preview (a stack removed by hand, or by a version that
    # removed it first): every node that is down might, and keeps the record until it is back.
    suspects = held if services else {node.id for node in nodes if node.state != "ready"}
    away = {node.id: why for node in nodes if node.id in suspects
            and (why := _unreachable(cli, node, cli.engine(node.hostname, manager))) is not None}
    problems: list[str] = []
    try:
        if services:
            cli.scale_to_zero([service["Spec"]["Name"] for service in services], None)
    except CommandFailed as exc:
        problems.append(f"stack: {exc.tail(3) or exc}")
    problems += _clear_nodes(cli, registry, deployment_id, manager, nodes, away, sorted(volumes), bool(services))
    if not problems:  # every node is clear: the services' labels are no longer needed
        try:
            if services or cli.networks(f"{STACK_LABEL}={deployment_id}"):
                cli.remove_stack(deployment_id)
        except CommandFailed as exc:
            problems.append(f"stack: {exc.tail(3) or exc}")
        problems += _remove_networks(cli, deployment_id)
    try:  # what `docker compose build` made, and the registry references tagged from it; an image pulled on the
        # manager carries whatever labels its publisher gave it: only these names are the preview's own
        ours = (f"{BUILT_IMAGES}/", registry.repository_prefix(deployment_id))
        for reference in cli.images("", "", label=f"com.docker.compose.project={deployment_id}"):
            if reference.startswith(ours):
                cli.docker(["image", "rm", reference], timeout=120)
        # the images of its earlier builds, untagged by each update's build (no name: no one else's)
        replaced = cli.docker(["image", "ls", "--quiet", "--no-trunc", "--filter", "dangling=true", "--filter",
                               f"label={DEPLOYMENT_LABEL}={deployment_id}"]).split()
    except CommandFailed as exc:
        problems.append(f"built image: {exc.tail(2) or exc}")
        replaced = []
    for image in replaced:  # each on its own; one in use by a container elsewhere is not the preview's problem
        try:
            cli.docker(["image", "rm", image], timeout=120)
        except CommandFailed:
            pass
    try:
        for repository, tags in registry.tags(deployment_id).items():
            for tag in tags:
                registry.delete(repository, tag)
    except RegistryError as exc:
        problems.append(f"registry: {exc}")
    return problems


def _unreachable(cli: SwarmCli, node: SwarmNode, engine: str | None) -> str | None:
    """Why a node's own engine cannot clear it now, or None. Asked, not only read from the node's state: the
    manager takes 10-20 s to see a node go down."""
    if node.state != "ready":
        return f"the node is {node.state}"
    if engine is None:
        return "SWARM_NODE_ENGINES has no engine for it"
    try:
        cli.docker(["version", "--format", "{{.Server.Version}}"], engine=engine or None, timeout=15)
    except CommandFailed:
        return "its engine does not answer"
    return None


def _clear_nodes(cli: SwarmCli, registry: Registry, deployment_id: str, manager: str, nodes: list[SwarmNode],
                 away: dict[str, str], volumes: list[str], known: bool) -> list[str]:
    """Every node that can be reached is cleared (a preview that moved may have left a volume anywhere); a node
    that held the preview and cannot be reached is named, with its volumes and the retry that follows."""
    problems: list[str] = []
    prefix = registry.repository_prefix(deployment_id)
    named = f" ({', '.join(volumes)})" if volumes else ""
    for node in nodes:
        if node.id in away and known:
            problems.append(f"node {node.hostname}: the preview's volumes stay there ({away[node.id]}){named}; "
                            "its services are kept, scaled to zero, and the cleanup is tried again until the node "
                            "is back")
            continue
        if node.id in away:
            problems.append(f"node {node.hostname}: the preview's volumes may be there ({away[node.id]}; the "
                            "preview's services are gone, so which nodes held it is not known); the cleanup is "
                            "tried again until the node is back, or `docker node rm` it")
            continue
        engine = cli.engine(node.hostname, manager)
        if engine is None or node.state != "ready":
            continue
        left = _clear_node(cli, engine, deployment_id, prefix)
        if left:
            problems.append(f"node {node.hostname}: {', '.join(left)} not removed")
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


def owned_resources(cli: SwarmCli, registry: Registry, deployment_id: str | None = None) -> dict[str, str]:
    """What the swarm holds of one preview (or of every preview), as `kind:name` -> deployment id: the services,
    networks, volumes on each ready node and the registry's tags. What removal must find gone."""
    label = DEPLOYMENT_LABEL if deployment_id is None else f"{DEPLOYMENT_LABEL}={deployment_id}"
    found: dict[str, str] = {}
    for service in cli.services(label):
        found[f"service:{service['Spec']['Name']}"] = service["Spec"]["Labels"].get(DEPLOYMENT_LABEL, "")
    found.update({f"network:{name}": owner for name, owner in cli.networks(label).items()})
    manager = cli.swarm_info().get("Name", "")
    for node in cli.nodes():
        engine = cli.engine(node.hostname, manager)
        if engine is None or node.state != "ready":
            continue
        found.update({f"volume:{node.hostname}/{name}": owner
                      for name, owner in cli.node_volumes(engine, label).items()})
    try:
        for repository, tags in registry.tags(deployment_id).items():
            owner = Registry.owner(repository, registry.namespace)
            found.update({f"image:{repository}:{tag}": owner for tag in tags})
    except RegistryError:
        pass  # the registry being away must not hide the stacks and volumes; its tags are found next time
    return found
