"""`docker compose` for one deployment's project, and label-based sweeping of what a project left behind.

Every docker command runs with the operator's Docker client configuration (host_env.HostEnv.docker) and
nothing else of the service's environment.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import (
    DEPLOYMENT_LABEL,
    OWNER_LABEL,
    ROLE_LABEL,
    CommandFailed,
    DeploymentLog,
    FlowControl,
    HostEnv,
    run_command,
)
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.plugin_api.types import BUILT_IMAGES
from orchestrator.runtime.compose_program import compose_program

COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
__all__ = ["OWNER_LABEL", "ROLE_LABEL", "Compose", "Container", "DockerResources"]


class Compose:
    def __init__(self, timeout: float, env: HostEnv) -> None:
        self._timeout = timeout
        self._env = env
        self._program = compose_program(env.docker())

    def _compose(self, project: str, compose_file: Path | None, args: list[str], cwd: Path | None,
                 log: DeploymentLog | None, timeout: float | None = None,
                 control: FlowControl | None = None) -> str:
        argv = [*self._program, "--project-name", project]
        if compose_file is not None:
            argv += ["--file", str(compose_file)]
        # No service variable reaches compose: `${CODEHOST_TOKEN}` in a pull request's compose file is empty. The
        # project's name is set in its environment too: compose copies a checkout's `.env` COMPOSE_* variables into
        # its own, and a command on a project it cannot load (`COMPOSE_DISABLE_ENV_FILE=x`) works on
        # COMPOSE_PROJECT_NAME's project, not --project-name's (`down` would remove another preview)
        env = {**self._env.docker(), "COMPOSE_PROJECT_NAME": project}
        return run_command([*argv, *args], cwd=cwd, env=env, timeout=timeout or self._timeout, log=log,
                           control=control)

    def normalized(self, compose_file: Path, project: str) -> dict[str, Any]:
        """The file as compose will run it (`docker compose config`: interpolated in the same clean environment,
        long syntax, absolute paths). Its output never reaches the log: env files are inlined in it."""
        with tempfile.TemporaryDirectory(prefix="po-config-") as scratch:
            output = Path(scratch) / "config.json"
            try:
                self._compose(project, compose_file, ["config", "--format", "json", "--output", str(output)],
                              compose_file.parent, None, timeout=60)
            except CommandFailed as exc:
                reason = exc.tail(3).replace(str(compose_file.parent) + "/", "") or str(exc)
                raise ConfigError([f"{compose_file.name} is not valid for docker compose: {reason}"]) from None
            document: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
        return document

    def build(self, project: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        self._compose(project, compose_file, ["build"], compose_file.parent, log, control=control)

    def up(self, project: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        self._compose(project, compose_file, ["up", "--detach", "--remove-orphans"], compose_file.parent, log,
                      control=control)

    def up_services(self, project: str, compose_file: Path, services: list[str], log: DeploymentLog,
                    control: FlowControl, no_deps: bool = False, start: bool = True) -> None:
        """Start only `services` (and what they depend on, unless `no_deps`: then their dependencies must run
        already); nothing is built. `start` False: only create them (and the network)."""
        options = ["--detach", "--no-build", *(["--no-deps"] if no_deps else []), *([] if start else ["--no-start"])]
        self._compose(project, compose_file, ["up", *options, *services], compose_file.parent, log, control=control)

    def pull(self, project: str, compose_file: Path, service: str, log: DeploymentLog,
             control: FlowControl) -> None:
        self._compose(project, compose_file, ["pull", service], compose_file.parent, log, control=control)

    def stop(self, project: str, log: DeploymentLog | None) -> None:
        self._compose(project, None, ["stop"], None, log, timeout=120)

    def logs(self, project: str, compose_file: Path, service: str | None, tail: int) -> str:
        """The last `tail` lines a service (or every service) printed; not written to the log by itself."""
        return self._compose(project, compose_file, ["logs", "--no-color", "--tail", str(tail),
                                                     *(["--", service] if service else [])],
                             compose_file.parent, None, timeout=60)

    def down(self, project: str, compose_file: Path | None, log: DeploymentLog | None) -> None:
        """Remove containers, networks, volumes and the images built for it (`--rmi local`: a closed pull
        request must not leave its image on the host's disk); works without the compose file (by project)."""
        cwd = compose_file.parent if compose_file else None
        self._compose(project, compose_file, ["down", "--volumes", "--remove-orphans", "--rmi", "local",
                                              "--timeout", "10"], cwd,
                      log, timeout=300)


@dataclass(frozen=True)
class Container:
    ident: str
    service: str  # its compose service
    healthcheck: list[str] | None  # the test of its healthcheck (["CMD", ...] or ["CMD-SHELL", "..."]), if any
    # Running, and Docker's health status "healthy": its healthcheck passed since the last start and has not failed
    # `retries` times in a row since (what compose's `service_healthy` waits for). A database an update finds
    # running needs no probe of its own.
    healthy: bool = False


class DockerResources:
    """What carries the deployment label on the engine, found and removed without compose."""

    def __init__(self, env: HostEnv) -> None:
        self._env = env

    def _docker(self, argv: list[str], log: DeploymentLog | None = None, timeout: float = 60,
                control: FlowControl | None = None, stdin: bytes | None = None) -> str:
        return run_command(["docker", *argv], cwd=None, env=self._env.docker(), timeout=timeout, log=log,
                           control=control, stdin=stdin)

    def command(self, argv: list[str], log: DeploymentLog | None = None, timeout: float = 60,
                control: FlowControl | None = None, stdin: bytes | None = None) -> str:
        """`docker <argv>` for what has no method here (database_seeds.py): its output, or CommandFailed."""
        return self._docker(argv, log, timeout, control, stdin)

    def _inspected(self, deployment_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The deployment's containers (running or stopped): each compose service and `docker inspect` of it."""
        ids = self._docker(["ps", "--all", "--quiet", "--filter",
                            f"label={DEPLOYMENT_LABEL}={deployment_id}"]).split()
        if not ids:
            return []
        return [(str(((item.get("Config") or {}).get("Labels") or {}).get(COMPOSE_SERVICE_LABEL, item.get("Name", ""))),
                 item) for item in json.loads(self._docker(["container", "inspect", *ids]))]

    def containers(self, deployment_id: str) -> list[Container]:
        """The deployment's containers (running or stopped), with their compose service and healthcheck."""
        found = []
        for service, item in self._inspected(deployment_id):
            test = ((item.get("Config") or {}).get("Healthcheck") or {}).get("Test") or None
            state = item.get("State") or {}
            healthy = state.get("Running") is True and (state.get("Health") or {}).get("Status") == "healthy"
            found.append(Container(str(item.get("Id", "")), service, [str(part) for part in test] if test else None,
                                   healthy))
        return found

    def remove(self, idents: list[str], log: DeploymentLog | None) -> None:
        if idents:
            self._docker(["rm", "--force", *idents], log=log, timeout=120)

    def volume_exists(self, name: str) -> bool:
        """CommandFailed when the engine cannot tell (it is down, it timed out): never taken for "absent"."""
        try:
            self._docker(["volume", "inspect", "--format", "{{.Name}}", name])
        except CommandFailed as exc:
            if "no such volume" in exc.output.lower():
                return False
            raise
        return True

    def start(self, idents: list[str], log: DeploymentLog | None) -> None:
        """Start stopped containers as they are (`docker start`). Not cut short by a cancellation (it takes a
        moment): killing the client would leave the engine starting a container the cleanup that follows is
        removing, and an image in use would stay behind."""
        if idents:
            self._docker(["start", *idents], log=log, timeout=120)

    def passes_healthcheck(self, container: Container, control: FlowControl, timeout: float = 5.0) -> bool:
        """Whether the container's own healthcheck passes now, run at once (`docker exec` of its test), rather than
        waiting for Docker's next scheduled check; True when it has none."""
        test = container.healthcheck or ["NONE"]
        if test[0] == "CMD":
            argv = test[1:]
        elif test[0] == "CMD-SHELL":
            argv = ["/bin/sh", "-c", " ".join(test[1:])]
        else:
            return True
        try:
            self._docker(["exec", container.ident, *argv], timeout=timeout, control=control)
        except CommandFailed:
            return False
        return True

    def labelled(self, kind: str, deployment_id: str | None = None, label: str | None = None) -> dict[str, str]:
        """Resources of `kind` (container, volume, network) carrying the deployment label (or `label`, a
        `key=value` filter): id -> deployment."""
        selector = label or (DEPLOYMENT_LABEL if deployment_id is None else f"{DEPLOYMENT_LABEL}={deployment_id}")
        if kind == "image":
            return self._built_images(selector)
        if kind == "container":
            argv = ["ps", "--all", "--filter", f"label={selector}", "--format", "{{json .}}"]
        else:
            argv = [kind, "ls", "--filter", f"label={selector}", "--format", "{{json .}}"]
        found: dict[str, str] = {}
        for line in self._docker(argv).splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            ident = item.get("ID") or item.get("Name")
            labels = dict(part.split("=", 1) for part in str(item.get("Labels", "")).split(",") if "=" in part)
            found[str(ident)] = labels.get(DEPLOYMENT_LABEL, deployment_id or "")
        return found

    def remove_labelled(self, deployment_id: str, log: DeploymentLog | None) -> list[str]:
        """Force-remove every container, network and volume of `deployment_id`, and the images built for it;
        returns what could not go."""
        problems: list[str] = []
        for kind, remove in (("container", ["rm", "--force", "--volumes"]),
                             ("network", ["network", "rm"]),
                             ("volume", ["volume", "rm", "--force"])):
            try:
                for ident in self.labelled(kind, deployment_id):
                    self._docker([*remove, ident], log=log, timeout=120)
            except CommandFailed as exc:
                problems.append(f"{kind}: {exc}")
        try:
            images = [*self.labelled("image", deployment_id), *self._legacy_images(deployment_id)]
            # the images of its earlier builds, untagged by each update's build; any image can carry the label,
            # so one that cannot go is not the preview's problem
            replaced = self._docker(["image", "ls", "--quiet", "--no-trunc", "--filter", "dangling=true",
                                     "--filter", f"label={DEPLOYMENT_LABEL}={deployment_id}"]).split()
        except CommandFailed as exc:
            return [*problems, f"image: {exc}"]
        for image in [*images, *replaced]:  # each on its own: one that cannot go does not keep the others
            try:
                self._docker(["image", "rm", "--force", image], log=log, timeout=120)
            except CommandFailed as exc:
                if image not in replaced:
                    problems.append(f"image: {exc}")
        return problems

    def _built_images(self, selector: str) -> dict[str, str]:
        """Images the service built (`po-build/…`, a name no repository may give: compose_policy) carrying the
        label `selector`: id -> deployment. A pulled image may carry any label its publisher chose: never counted.
        `docker image ls` prints no labels: they are asked of each image."""
        listed = self._docker(["image", "ls", "--no-trunc", "--filter", f"label={selector}", "--filter",
                               f"reference={BUILT_IMAGES}/*", "--format", "{{.ID}}"]).split()
        found: dict[str, str] = {}
        for ident in sorted(set(listed)):
            try:
                found[ident] = self._docker(["image", "inspect", "--format",
                                             f'{{{{index .Config.Labels "{DEPLOYMENT_LABEL}"}}}}', ident]).strip()
            except CommandFailed:
                continue  # removed meanwhile
        return found

    def _legacy_images(self, deployment_id: str) -> list[str]:
        """Images built before they were named by a keyed digest: compose's `{deployment id}-{service}`, by that
        name (and compose's project label, so no image of another kind is taken)."""
        return sorted(set(self._docker(["image", "ls", "--filter", f"reference={deployment_id}-*", "--filter",
                                        f"label=com.docker.compose.project={deployment_id}", "--format",
                                        "{{.Repository}}:{{.Tag}}"]).split()))

    def remove_containers(self, label: str) -> list[str]:
        """Force-remove the containers carrying `label` (`key=value`); returns their ids."""
        removed = list(self.labelled("container", label=label))
        for ident in removed:
            self._docker(["rm", "--force", ident], timeout=120)
        return removed

    def container_states(self, deployment_id: str) -> dict[str, dict[str, Any]]:
        """compose service -> its container's State (Status, ExitCode, ...) and RestartCount."""
        return {service: {**(item.get("State") or {}), "RestartCount": item.get("RestartCount", 0)}
                for service, item in self._inspected(deployment_id)}

    def has_image(self, image: str) -> bool:
        try:
            self._docker(["image", "inspect", "--format", "{{.Id}}", image])
        except CommandFailed:
            return False
        return True

    def image_command(self, image: str) -> tuple[list[str] | None, list[str] | None]:
        """The ENTRYPOINT and CMD of a local image; CommandFailed when it is not on the engine."""
        config = json.loads(self._docker(["image", "inspect", "--format", "{{json .Config}}", image]))
        return config.get("Entrypoint"), config.get("Cmd")

    def published_host_ports(self) -> set[int]:
        """Host ports published by running containers (any project, not only ours)."""
        ports: set[int] = set()
        for line in self._docker(["ps", "--format", "{{.Ports}}"]).splitlines():
            for mapping in line.split(","):
                if "->" not in mapping:
                    continue
                host_side = mapping.split("->")[0].strip()
                port = host_side.rsplit(":", 1)[-1]
                if "-" in port:
                    first, last = port.split("-", 1)
                    if first.isdigit() and last.isdigit():
                        ports.update(range(int(first), int(last) + 1))
                elif port.isdigit():
                    ports.add(int(port))
        return ports
