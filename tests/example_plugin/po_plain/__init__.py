"""An example third-party runtime plugin: `plain`, previews run with the `docker compose` command line and nothing
more, written only from docs/plugins.md ("A runtime") and orchestrator/plugin_api/runtime.py.

It implements the required methods of `Runtime` and one optional one (`checks`); everything else keeps the base's
default, so its previews never sleep, start every service with `start`, and initialise their databases themselves.
Its settings come from the environment through `OwnSettings`: PLAIN_COMPOSE_TIMEOUT_SECONDS.

Every program runs from an argument list, never a shell, with an environment of its own: the service's variables
(its code host token, webhook secret) must never reach `docker compose`, which interpolates `${...}` in the pull
request's compose file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from orchestrator.plugin_api import (
    DEPLOYMENT_LABEL,
    Check,
    ConfigError,
    DeploymentLog,
    FlowControl,
    OwnSettings,
    Runtime,
    RuntimeFailure,
    RuntimeSpec,
    hookimpl,
    read_own_settings,
)

NAME = "plain"


class PlainSettings(OwnSettings):
    model_config = SettingsConfigDict(env_prefix="PLAIN_")

    compose_timeout_seconds: float = Field(default=900.0, gt=0)


@hookimpl
def po_runtimes() -> list[RuntimeSpec]:
    return [RuntimeSpec(name=NAME, description="docker compose on this host, nothing more (the example runtime)")]


@hookimpl
def po_runtime(name: str, settings: Any) -> PlainRuntime | None:
    if name != NAME:
        return None
    return PlainRuntime(read_own_settings(PlainSettings).compose_timeout_seconds)


class PlainRuntime(Runtime):
    name = NAME

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    # Required ---------------------------------------------------------------------------------------------

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        try:
            output = self._run(self._compose(deployment_id, compose_file, "config", "--format", "json"),
                               compose_file.parent)
        except RuntimeFailure as exc:
            raise ConfigError([f"{compose_file.name} is not valid for docker compose: {exc.detail[-300:]}"]) from None
        document: dict[str, Any] = json.loads(output)
        return document

    def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        self._run(self._compose(deployment_id, compose_file, "build"), compose_file.parent, log, "Docker build failed")

    def image_command(self, deployment_id: str, compose_file: Path, service: str, image: str, log: DeploymentLog,
                      control: FlowControl) -> tuple[list[str] | None, list[str] | None]:
        inspect = ["docker", "image", "inspect", "--format", "{{json .Config.Entrypoint}} {{json .Config.Cmd}}", image]
        try:
            output = self._run(inspect)
        except RuntimeFailure:  # an `image:` no build made: pulled first
            self._run(self._compose(deployment_id, compose_file, "pull", service), compose_file.parent, log,
                      "The app image could not be pulled")
            output = self._run(inspect, message="The app image's entrypoint could not be read")
        entrypoint, command = output.strip().split(" ", 1)
        return json.loads(entrypoint), json.loads(command)

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        # `up` recreates what changed and returns once the new containers are started: nothing of before runs.
        log.note("the plain runtime starts the preview with docker compose up")
        self._run(self._compose(deployment_id, compose_file, "up", "--detach", "--remove-orphans"),
                  compose_file.parent, log, "The preview could not be started")

    def stop(self, deployment_id: str, log: DeploymentLog | None) -> None:
        self._run(["docker", "compose", "--project-name", deployment_id, "stop"], log=log,
                  message="The preview could not be stopped")

    def remove(self, deployment_id: str, compose_file: Path | None) -> list[str]:
        left = []
        try:
            self._run(["docker", "compose", "--project-name", deployment_id, "down", "--volumes", "--remove-orphans"])
        except RuntimeFailure as exc:
            left.append(f"compose down failed: {exc.detail[-200:]}")
        built = ["docker", "image", "ls", "-q", "--filter", f"label={DEPLOYMENT_LABEL}={deployment_id}"]
        for image in self._lines(built):
            try:
                self._run(["docker", "image", "rm", "--force", image])
            except RuntimeFailure:
                left.append(f"image {image}")
        left += [f"{kind} {name}" for kind, name in self._labelled(deployment_id)]
        return left

    def logs(self, deployment_id: str, compose_file: Path, service: str | None, tail: int) -> str:
        argv = self._compose(deployment_id, compose_file, "logs", "--no-color", "--tail", str(tail))
        try:
            return self._run([*argv, *([service] if service else [])], compose_file.parent)
        except RuntimeFailure as exc:
            return exc.detail

    def problem(self, deployment_id: str) -> str | None:
        listing = self._run(["docker", "compose", "--project-name", deployment_id, "ps", "--all", "--format", "json"])
        for line in listing.splitlines():
            container = json.loads(line)
            service, state = container.get("Service"), container.get("State")
            if service in ("app", "db") and state in ("exited", "dead"):
                return f"{service} exited with code {container.get('ExitCode')}"
            if service in ("app", "db") and state == "restarting":
                return f"{service} is restarting (exit code {container.get('ExitCode')})"
        return None

    def owned(self, deployment_id: str | None = None) -> dict[str, str]:
        label = DEPLOYMENT_LABEL if deployment_id is None else f"{DEPLOYMENT_LABEL}={deployment_id}"
        found = {}
        for kind, argv in (("container", ["docker", "ps", "--all"]), ("volume", ["docker", "volume", "ls"]),
                           ("network", ["docker", "network", "ls"])):
            template = f'{{{{.Name}}}} {{{{.Label "{DEPLOYMENT_LABEL}"}}}}' if kind != "container" else \
                f'{{{{.Names}}}} {{{{.Label "{DEPLOYMENT_LABEL}"}}}}'
            for line in self._lines([*argv, "--filter", f"label={label}", "--format", template]):
                name, _, owner = line.partition(" ")
                found[f"{kind}:{name}"] = owner
        return found

    def app_url(self, deployment_id: str, app_port: int, path: str) -> str:
        return f"http://127.0.0.1:{app_port}{path}"  # the generated compose file publishes it on the loopback

    def ports_in_use(self) -> set[int]:
        ports = set()
        for line in self._lines(["docker", "ps", "--format", "{{.Ports}}"]):
            for mapping in line.split(", "):
                host, arrow, _ = mapping.partition("->")
                if arrow and host.rsplit(":", 1)[-1].isdigit():
                    ports.add(int(host.rsplit(":", 1)[-1]))
        return ports

    # Optional ---------------------------------------------------------------------------------------------

    def checks(self) -> list[Check]:
        try:
            version = self._run(["docker", "compose", "version", "--short"]).strip()
        except RuntimeFailure as exc:
            return [Check("docker compose for the plain runtime", False, exc.detail[-200:],
                          "install Docker's compose plugin", hard=True)]
        return [Check("docker compose for the plain runtime", True, f"version {version}")]

    # Helpers ------------------------------------------------------------------------------------------------

    @staticmethod
    def _compose(deployment_id: str, compose_file: Path, *args: str) -> list[str]:
        return ["docker", "compose", "--project-name", deployment_id, "--file", str(compose_file), *args]

    def _labelled(self, deployment_id: str) -> list[tuple[str, str]]:
        return [(key.split(":", 1)[0], key.split(":", 1)[1]) for key in self.owned(deployment_id)]

    def _lines(self, argv: list[str]) -> list[str]:
        return [line for line in self._run(argv).splitlines() if line.strip()]

    def _run(self, argv: list[str], cwd: Path | None = None, log: DeploymentLog | None = None,
             message: str = "A docker command failed") -> str:
        env = {name: os.environ[name] for name in ("PATH", "HOME", "DOCKER_HOST") if name in os.environ}
        try:
            done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeFailure(message, str(exc)) from None
        if log is not None:
            log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RuntimeFailure(message, (done.stdout + done.stderr)[-2000:])
        return done.stdout
