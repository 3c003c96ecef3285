"""The Docker CLI against a swarm: the manager (the service's own Docker engine) and, for what only a node's own
engine can do (its volumes, its containers, the images it pulled), the engines of SWARM_NODE_ENGINES.

Every command is an argument list run with the operator's Docker client configuration (host_env.HostEnv.docker),
or with the service's own one that holds the registry's credentials (registry.client_config) when there is one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import CommandFailed, DeploymentLog, FlowControl, HostEnv, run_command

STACK_LABEL = "com.docker.stack.namespace"
_EXIT = re.compile(r"non-zero exit \((\d+)\)")


@dataclass(frozen=True)
class SwarmNode:
    id: str
    hostname: str
    manager: bool
    state: str  # ready, down, unknown, disconnected
    availability: str  # active, pause, drain
    address: str  # what the node advertises: where its host-mode ports answer

    @property
    def usable(self) -> bool:
        return self.state == "ready" and self.availability == "active"


@dataclass(frozen=True)
class Task:
    id: str
    service: str  # without the stack's prefix
    node: str  # hostname ("" while pending)
    desired: str  # running, ready, shutdown
    state: str  # new, pending, assigned, preparing, starting, running, complete, failed, rejected, shutdown
    error: str

    @property
    def exit_code(self) -> int | None:
        match = _EXIT.search(self.error)
        return int(match[1]) if match else None


class SwarmCli:
    def __init__(self, env: HostEnv, node_engines: dict[str, str], timeout: float,
                 client_config: Path | None = None) -> None:
        self._env = env
        self._engines = node_engines
        self._timeout = timeout
        self._client_config = client_config

    @property
    def engines(self) -> dict[str, str]:
        """SWARM_NODE_ENGINES: hostname -> Docker host."""
        return dict(self._engines)

    def docker(self, argv: list[str], log: DeploymentLog | None = None, timeout: float = 60,
               control: FlowControl | None = None, engine: str | None = None) -> str:
        where = ["--host", engine] if engine else []
        env = self._env.docker()
        if self._client_config is not None:
            env["DOCKER_CONFIG"] = str(self._client_config)
        return run_command(["docker", *where, *argv], cwd=None, env=env, timeout=timeout, log=log, control=control)

    # The swarm, as its manager sees it ---------------------------------------------------------------------

    def swarm_info(self) -> dict[str, Any]:
        """`docker info`'s Swarm part, plus the engine's own name (LocalNodeState, ControlAvailable, ...)."""
        info: dict[str, Any] = json.loads(self.docker(["info", "--format", "{{json .}}"], timeout=30))
        return {**(info.get("Swarm") or {}), "Name": info.get("Name", "")}

    def nodes(self) -> list[SwarmNode]:
        ids = self.docker(["node", "ls", "--quiet"]).split()
        if not ids:
            return []
        nodes = []
        for item in json.loads(self.docker(["node", "inspect", *ids])):
            spec, status = item.get("Spec") or {}, item.get("Status") or {}
            nodes.append(SwarmNode(item["ID"], (item.get("Description") or {}).get("Hostname", ""),
                                   spec.get("Role") == "manager", status.get("State", "unknown"),
                                   spec.get("Availability", "active"), status.get("Addr", "")))
        return nodes

    def services(self, label: str | None) -> list[dict[str, Any]]:
        """`docker service inspect` of the services carrying `label` (`key` or `key=value`), or of all."""
        ids = self.docker(["service", "ls", "--quiet", *(["--filter", f"label={label}"] if label else [])]).split()
        return json.loads(self.docker(["service", "inspect", *ids])) if ids else []

    def stack_services(self, stack: str) -> list[dict[str, Any]]:
        """`docker service inspect` of the stack's services."""
        return self.services(f"{STACK_LABEL}={stack}")

    def tasks(self, stack: str) -> list[Task]:
        """Every task of the stack, newest first within a service (history included); [] without the stack."""
        try:
            output = self.docker(["stack", "ps", "--no-trunc", "--format", "{{json .}}", stack], timeout=30)
        except CommandFailed as exc:
            if "nothing found in stack" in exc.output:
                return []
            raise
        tasks = []
        for line in output.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            service = str(item.get("Name", "")).removeprefix(f"{stack}_").rsplit(".", 1)[0]
            tasks.append(Task(item.get("ID", ""), service, item.get("Node", ""),
                              str(item.get("DesiredState", "")).lower(),
                              str(item.get("CurrentState", "")).split(" ", 1)[0].lower(),
                              str(item.get("Error", "")).strip('"')))
        return tasks

    def task_nodes(self, task_ids: list[str]) -> dict[str, str]:
        """Task id -> the id of the node it was given to ('' while unassigned)."""
        if not task_ids:
            return {}
        output = self.docker(["inspect", "--type", "task", "--format", "{{.ID}} {{.NodeID}}", *task_ids], timeout=30)
        return dict((line.split() + [""])[:2] for line in output.splitlines() if line.strip())

    def deploy(self, stack: str, stack_file: Path, log: DeploymentLog, control: FlowControl, prune: bool) -> None:
        self.docker(["stack", "deploy", "--detach=true", "--with-registry-auth", "--resolve-image", "always",
                     *(["--prune"] if prune else []), "--compose-file", str(stack_file), stack],
                    log=log, timeout=self._timeout, control=control)

    def force_update(self, service: str, log: DeploymentLog | None) -> None:
        """A new task for the service, its spec unchanged (`--force`)."""
        self.docker(["service", "update", "--detach", "--force", "--with-registry-auth", service], log=log,
                    timeout=120)

    def remove_stack(self, stack: str) -> None:
        self.docker(["stack", "rm", stack], timeout=120)

    def scale_to_zero(self, services: list[str], log: DeploymentLog | None) -> None:
        if services:
            self.docker(["service", "scale", "--detach", *(f"{name}=0" for name in services)], log=log,
                        timeout=120)

    def service_logs(self, service: str, tail: int) -> str:
        return self.docker(["service", "logs", "--raw", "--no-trunc", "--tail", str(tail), service], timeout=60)

    def published_ports(self) -> set[int]:
        ports: set[int] = set()
        for service in self.services(None):  # any service's, ours or not
            for port in ((service.get("Endpoint") or {}).get("Ports") or []):
                if port.get("PublishedPort"):
                    ports.add(int(port["PublishedPort"]))
        return ports

    def networks(self, label: str) -> dict[str, str]:
        """Networks carrying `label` (`key=value` or `key`): name -> deployment."""
        output = self.docker(["network", "ls", "--filter", f"label={label}", "--format",
                              "{{.Name}}\t{{.Label \"dev.preview-orchestrator.deployment\"}}"])
        return dict((line.split("\t") + [""])[:2] for line in output.splitlines() if line.strip())

    # One node's own engine -------------------------------------------------------------------------------

    def engine(self, hostname: str, manager_name: str) -> str | None:
        """The Docker host of a node's engine: the service's own for the manager it runs on, else
        SWARM_NODE_ENGINES; None when it is not known (then nothing can be removed there)."""
        if hostname in self._engines:
            return self._engines[hostname]
        return "" if hostname == manager_name else None

    def node_volumes(self, engine: str, label: str) -> dict[str, str]:
        """Volumes carrying `label` on that engine: name -> deployment."""
        output = self.docker(["volume", "ls", "--filter", f"label={label}", "--format",
                              "{{.Name}}\t{{.Label \"dev.preview-orchestrator.deployment\"}}"],
                             engine=engine or None, timeout=30)
        return dict(line.split("\t", 1) for line in output.splitlines() if "\t" in line)

    def clear_node(self, engine: str, deployment_id: str, image_prefix: str) -> list[str]:
        """Remove the deployment's containers, volumes and pulled images from one engine; returns what stays.
        Containers first (a volume in use cannot go), by force: the stack is already gone."""
        host = engine or None
        label = f"label=dev.preview-orchestrator.deployment={deployment_id}"
        left: list[str] = []
        containers = self.docker(["ps", "--all", "--quiet", "--filter", label], engine=host).split()
        if containers:
            self.docker(["rm", "--force", "--volumes", *containers], engine=host, timeout=120)
        for volume in self.node_volumes(engine, f"dev.preview-orchestrator.deployment={deployment_id}"):
            try:
                self.docker(["volume", "rm", "--force", volume], engine=host, timeout=60)
            except CommandFailed:
                left.append(f"volume {volume}")
        for reference in self.images(engine, image_prefix):
            try:
                self.docker(["image", "rm", reference], engine=host, timeout=120)
            except CommandFailed:
                left.append(f"image {reference}")
        return left

    def images(self, engine: str, prefix: str, label: str | None = None) -> list[str]:
        """References (`repo:tag`, or `repo@digest` for an image pulled by digest) whose repository starts
        with `prefix`, or images carrying `label`. Never image ids: one id may have other names too."""
        argv = ["images", "--digests", "--format", "{{.Repository}}\t{{.Tag}}\t{{.Digest}}"]
        output = self.docker([*argv, *(["--filter", f"label={label}"] if label else [])], engine=engine or None)
        found = []
        for line in output.splitlines():
            repository, tag, digest = (line.split("\t") + ["", "", ""])[:3]
            if label is None and not repository.startswith(prefix):
                continue
            if tag and tag != "<none>":
                found.append(f"{repository}:{tag}")
            elif digest and digest != "<none>":
                found.append(f"{repository}@{digest}")
        return found
