"""Which swarm node a preview runs on. It is chosen at the preview's first deploy (the ready worker with the fewest
previews) and kept on its services (a placement constraint and NODE_LABEL): its database's volume is there. A
preview whose node is gone moves to another on its next deploy, and FORMER_LABEL remembers where it was."""

from __future__ import annotations

from orchestrator.plugin_api import DeploymentLog, RuntimeFailure
from orchestrator.runtime.swarm.cli import STACK_LABEL, SwarmCli, SwarmNode
from orchestrator.runtime.swarm.stack import FORMER_LABEL, NODE_LABEL
from orchestrator.runtime.swarm.tasks import node_lost


class Placement:
    def __init__(self, cli: SwarmCli) -> None:
        self.cli = cli
        self._placed: dict[str, str] = {}  # deployment -> node chosen by this process (deploys run in parallel)

    def pinned(self, deployment_id: str) -> tuple[str | None, list[str]]:
        """The node the stack's services are pinned to, and the nodes it was pinned to before."""
        for service in self.cli.stack_services(deployment_id):
            labels = service["Spec"].get("Labels") or {}
            if labels.get(NODE_LABEL):
                return labels[NODE_LABEL], [n for n in labels.get(FORMER_LABEL, "").split(",") if n]
        return None, []

    def place(self, deployment_id: str, log: DeploymentLog) -> tuple[SwarmNode, list[str]]:
        nodes = {node.id: node for node in self.cli.nodes()}
        pinned, former = self.pinned(deployment_id)
        if pinned is not None:
            node = nodes.get(pinned)
            if node is not None and node.usable:
                return node, former
            where = f"{node.hostname} is {node.state}" if node else f"{pinned} left the swarm"
            log.note(f"the node this preview ran on ({where}): it moves to another node; its database starts empty")
            former = [*former, pinned]
        usable = [node for node in nodes.values() if node.usable]
        if not usable:
            raise RuntimeFailure("No swarm node is ready to run the preview", "docker node ls: no node is Ready "
                                 "and Active")
        load: dict[str, set[str]] = {}
        for service in self.cli.services(NODE_LABEL):
            labels = service["Spec"].get("Labels") or {}
            load.setdefault(labels.get(NODE_LABEL, ""), set()).add(labels.get(STACK_LABEL, ""))
        for other, node_id in self._placed.items():  # chosen by a deploy running beside this one
            load.setdefault(node_id, set()).add(other)
        candidates = [node for node in usable if not node.manager] or usable  # managers only when alone
        chosen = min(candidates, key=lambda n: (len(load.get(n.id, ())), n.hostname))
        self._placed[deployment_id] = chosen.id
        return chosen, former

    def forget(self, deployment_id: str) -> None:
        self._placed.pop(deployment_id, None)

    def node_problem(self, deployment_id: str) -> str | None:
        pinned = self.pinned(deployment_id)[0]
        if pinned is None:
            return None
        return node_lost(pinned, {node.id: node for node in self.cli.nodes()})

    def lost(self, deployment_ids: list[str]) -> dict[str, str]:
        """deployment -> why, for the previews of `deployment_ids` whose node is down or gone."""
        nodes = {node.id: node for node in self.cli.nodes()}
        pins = {}
        for service in self.cli.services(NODE_LABEL):
            labels = service["Spec"].get("Labels") or {}
            pins[labels.get(STACK_LABEL, "")] = labels.get(NODE_LABEL, "")
        lost = {}
        for deployment_id in deployment_ids:
            if deployment_id in pins and (why := node_lost(pins[deployment_id], nodes)) is not None:
                lost[deployment_id] = why
        return lost
