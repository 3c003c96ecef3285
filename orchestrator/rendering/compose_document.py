"""The compose document a deploy runs, whoever wrote it: its names and limits, the labels every resource carries,
`$` escaping, and the planned files (RenderedDeployment)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.common.safe_yaml import dump_compose
from orchestrator.plugin_api.types import DatabaseSeed, RenderContext

GENERATED_COMPOSE = "compose.preview.yml"
REPO_COMPOSE_NAMES = ("compose.preview.yml", "compose.preview.yaml")
REPO_COMPOSE_OUTPUT = "compose.preview.generated.yml"
INJECTED_DOCKERFILE = "Dockerfile.preview-orchestrator"
MAX_COMPOSE_BYTES = 256 * 1024
PASSWORD_PLACEHOLDER = "<db-password>"  # noqa: S105 - shown instead of the password
# `docker compose config` for a compose file in its repository: the normalised document, or ConfigError.
Normalizer = Callable[[Path, str], dict[str, Any]]
RESOURCES = {
    "limits": {"cpus": "0.5", "memory": "512M"},
    "reservations": {"cpus": "0.25", "memory": "256M"},
}
# Bounds a repository cannot lift (docs/security.md, "Between previews"): processes and threads per container (a
# fork bomb stops there), container logs kept by Docker (a log flood stops there), and no raw sockets (a
# preview cannot forge packets on Docker's bridge). A file's own pids_limit may only be lower; compose_policy
# refuses ulimits other than ALLOWED_ULIMITS.
PIDS_LIMIT = 1024
LOG_OPTIONS = {"max-size": "10m", "max-file": "3"}
DROPPED_CAPABILITIES = ("NET_RAW",)



@dataclass(frozen=True)
class PendingStartup:
    """startup_commands in front of a main process that is the image's own (a repository's Dockerfile or compose
    file): it is known once the image is built, from its ENTRYPOINT and CMD (see `main_process`)."""

    commands: list[str]
    image: str
    entrypoint: list[str] | None = None  # the compose file's own `entrypoint`, replacing the image's
    command: list[str] | None = None  # the compose file's own `command`, replacing the image's CMD


@dataclass
class RenderedDeployment:
    """What a deploy writes into the work directory and which compose file it then runs."""

    compose_file: str
    compose: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    rename: tuple[str, str] | None = None  # compose.preview.yaml -> compose.preview.yml
    repository_owned: bool = False
    pending_startup: PendingStartup | None = None
    seed: DatabaseSeed | None = None  # the database plugin's, for a compose file generated from the plugins
    # What a build reads besides the checkout, written into `build_dir` (Dockerfiles whose cache mounts the service
    # keyed to the repository, and a Dockerfile's own .dockerignore): name -> text.
    build_files: dict[str, str] = field(default_factory=dict)
    # Services routed besides `app` (a repository compose file's x-preview; routed_services.py), ports not yet given.
    routes: list[Any] = field(default_factory=list)
    # A base preview's: the image its build's DEPENDENCIES_STAGE is kept as (flows/base_dependencies.py); "": none
    kept_dependencies: str = ""
    # A pull request's whose injected Dockerfile starts FROM its base preview's kept dependencies: that image, and
    # the injected Dockerfile rendered without it, for a build that finds it gone (flows/base_dependencies.py)
    without_base: tuple[str, str] | None = None

    def compose_text(self) -> str:
        return dump_compose(self.compose)



def build_dir(repo_dir: Path) -> Path:
    """Where a deploy writes `build_files`: beside the work directory (as its git directory is), never in it, so no
    file or link of the pull request's is written through or read back."""
    return repo_dir.with_name(f"{repo_dir.name}.build")


def apply_common(compose: dict[str, Any], context: RenderContext) -> None:
    """Labels on everything, the spec's limits on every service, and an init process for the app."""
    labels = {DEPLOYMENT_LABEL: context.deployment_id}
    # The app runs as PID 1 (`exec` in its command), and PID 1 ignores SIGTERM unless it installs a handler,
    # which a plain Node, Python or Go server does not: every update and cleanup then waited compose's 10 s
    # before a SIGKILL. Docker's init forwards the signal, so the app stops at once (a file's own `init` stays).
    app = compose["services"].get("app")
    if isinstance(app, dict):
        app.setdefault("init", True)
    for name, service in compose["services"].items():
        if isinstance(service.get("build"), dict):
            if not service.get("image"):
                service["image"] = context.built_image(str(name))  # not compose's public `{project}-{service}`
            # the image carries the label too: a cleanup, and start-up's look for leftovers, find it by it
            service["build"]["labels"] = {**as_dict(service["build"].get("labels")), **labels}
        existing = service.get("labels") or {}
        if isinstance(existing, list):
            existing = dict(item.split("=", 1) if "=" in item else (item, "") for item in existing)
        service["labels"] = {**existing, **labels}
        apply_bounds(service)
    networks = compose.get("networks") or {}
    networks.setdefault("default", {})
    for name, network in list(networks.items()):
        network = network if isinstance(network, dict) else {}
        network["labels"] = {**as_dict(network.get("labels")), **labels}
        networks[name] = network
    compose["networks"] = networks
    volumes = compose.get("volumes") or {}
    for name, volume in list(volumes.items()):
        volume = volume if isinstance(volume, dict) else {}
        volume["labels"] = {**as_dict(volume.get("labels")), **labels}
        volumes[name] = volume
    if volumes:
        compose["volumes"] = volumes


def apply_bounds(service: dict[str, Any]) -> None:
    """The spec's RESOURCES with PIDS_LIMIT (or the service's own lower pids_limit: compose refuses both
    spellings at once, so the limit is kept in deploy.resources only), bounded logs in Docker's json-file or local
    driver, and DROPPED_CAPABILITIES added to the service's own cap_drop."""
    own = service.pop("pids_limit", None)
    lower = isinstance(own, int) and not isinstance(own, bool) and 0 < own < PIDS_LIMIT
    deploy = service.get("deploy") if isinstance(service.get("deploy"), dict) else {}
    service["deploy"] = {**deploy, "resources": {
        "limits": {**RESOURCES["limits"], "pids": own if lower else PIDS_LIMIT},
        "reservations": dict(RESOURCES["reservations"])}}
    driver = (service.get("logging") or {}).get("driver") if isinstance(service.get("logging"), dict) else None
    service["logging"] = {"driver": driver if driver in ("json-file", "local") else "json-file",
                          "options": dict(LOG_OPTIONS)}
    dropped = [str(c) for c in service.get("cap_drop") or [] if isinstance(c, str)]
    service["cap_drop"] = [*dropped, *(c for c in DROPPED_CAPABILITIES if c not in dropped and "ALL" not in dropped)]


def as_dict(labels: Any) -> dict[str, str]:
    if isinstance(labels, dict):
        return {str(k): str(v) for k, v in labels.items()}
    if isinstance(labels, list):
        return dict(str(item).split("=", 1) if "=" in str(item) else (str(item), "") for item in labels)
    return {}


def environment_dict(environment: Any) -> dict[str, Any]:
    """A service's `environment`, mapping or list, as a mapping."""
    if isinstance(environment, dict):
        return {str(k): v for k, v in environment.items()}
    if isinstance(environment, list):
        result: dict[str, Any] = {}
        for item in environment:
            key, sep, value = str(item).partition("=")
            result[key] = value if sep else None
        return result
    return {}


def escape(value: Any) -> Any:
    """Escape compose interpolation (`$` → `$$`) in every string of a compose file we generate."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [escape(item) for item in value]
    if isinstance(value, dict):
        return {key: escape(item) for key, item in value.items()}
    return value


