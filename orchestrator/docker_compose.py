"""`docker compose` for one deployment's project, and label-based sweeping of what a project left behind."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.commands import CommandFailed, DeploymentLog, clean_env, run
from orchestrator.rendering import DEPLOYMENT_LABEL


class Compose:
    def __init__(self, timeout: float, home: Path) -> None:
        self._timeout = timeout
        self._home = home

    def _compose(self, project: str, compose_file: Path | None, args: list[str], cwd: Path | None,
                 log: DeploymentLog | None, timeout: float | None = None) -> str:
        argv = ["docker", "compose", "--project-name", project]
        if compose_file is not None:
            argv += ["--file", str(compose_file)]
        # A clean environment: `${CODEHOST_TOKEN}` in a pull request's compose file expands to nothing.
        return run([*argv, *args], cwd=cwd, env=clean_env(home=self._home), timeout=timeout or self._timeout,
                   log=log)

    def build(self, project: str, compose_file: Path, log: DeploymentLog) -> None:
        self._compose(project, compose_file, ["build"], compose_file.parent, log)

    def up(self, project: str, compose_file: Path, log: DeploymentLog) -> None:
        self._compose(project, compose_file, ["up", "--detach", "--remove-orphans"], compose_file.parent, log)

    def stop(self, project: str, log: DeploymentLog | None) -> None:
        self._compose(project, None, ["stop"], None, log, timeout=120)

    def logs(self, project: str, compose_file: Path, service: str, tail: int) -> str:
        """The last `tail` lines a service printed (for a failure comment); not written to the log."""
        return self._compose(project, compose_file, ["logs", "--no-color", "--tail", str(tail), service],
                             compose_file.parent, None, timeout=60)

    def down(self, project: str, compose_file: Path | None, log: DeploymentLog | None) -> None:
        """Remove containers, networks, volumes and the images built for it (`--rmi local`: a closed pull
        request must not leave its image on the host's disk); works without the compose file (by project)."""
        cwd = compose_file.parent if compose_file else None
        self._compose(project, compose_file, ["down", "--volumes", "--remove-orphans", "--rmi", "local",
                                              "--timeout", "10"], cwd,
                      log, timeout=300)


def labelled(kind: str, deployment_id: str | None = None) -> dict[str, str]:
    """Resources of `kind` (container, volume, network) carrying the deployment label: id -> deployment."""
    label = DEPLOYMENT_LABEL if deployment_id is None else f"{DEPLOYMENT_LABEL}={deployment_id}"
    if kind == "container":
        argv = ["docker", "ps", "--all", "--filter", f"label={label}", "--format", "{{json .}}"]
    else:
        argv = ["docker", kind, "ls", "--filter", f"label={label}", "--format", "{{json .}}"]
    output = run(argv, cwd=None, env=clean_env(), timeout=60, log=None)
    found: dict[str, str] = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        ident = item.get("ID") or item.get("Name")
        labels = dict(part.split("=", 1) for part in str(item.get("Labels", "")).split(",") if "=" in part)
        found[str(ident)] = labels.get(DEPLOYMENT_LABEL, deployment_id or "")
    return found


def remove_labelled(deployment_id: str, log: DeploymentLog | None) -> list[str]:
    """Force-remove every container, network and volume of `deployment_id`; returns what could not go."""
    problems: list[str] = []
    for kind, remove in (("container", ["docker", "rm", "--force", "--volumes"]),
                         ("network", ["docker", "network", "rm"]),
                         ("volume", ["docker", "volume", "rm", "--force"])):
        try:
            for ident in labelled(kind, deployment_id):
                run([*remove, ident], cwd=None, env=clean_env(), timeout=120, log=log)
        except CommandFailed as exc:
            problems.append(f"{kind}: {exc}")
    return problems


def published_host_ports() -> set[int]:
    """Host ports published by running containers (any project, not only ours)."""
    output = run(["docker", "ps", "--format", "{{.Ports}}"], cwd=None, env=clean_env(), timeout=60, log=None)
    ports: set[int] = set()
    for line in output.splitlines():
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
