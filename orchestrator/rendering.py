"""From a checkout and its preview-config.yml to the exact compose file (and Dockerfile) a deploy runs.

Compose files are built as data and dumped with a YAML dumper, so no value can inject YAML. Every string
we put into a compose file is escaped for compose's own `$` interpolation, so `$HOME` in an `env` entry stays
literal. A repository-owned compose file is judged and run in the form compose itself produces from it
(`docker compose config`: interpolated in a clean environment, normalised), so what the policy accepts is
exactly what runs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.checkout_paths import write_new
from orchestrator.compose_policy import normalized_problems, raw_problems
from orchestrator.naming import deployment_id as make_deployment_id
from orchestrator.naming import project_slug
from orchestrator.plugin_host import PluginHost
from orchestrator.plugin_types import AppService, DatabaseWiring, RenderContext, ServiceWiring
from orchestrator.preview_config import ConfigError, PreviewConfig, ensure_inside
from orchestrator.project_files import ProjectFiles
from orchestrator.safe_yaml import YamlRejected, load_untrusted_yaml

DEPLOYMENT_LABEL = "dev.preview-orchestrator.deployment"
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

    def compose_text(self) -> str:
        return dump_compose(self.compose)


def main_process(pending: PendingStartup, image_entrypoint: list[str] | None,
                 image_cmd: list[str] | None) -> list[str]:
    """What `docker run` of the app would run: Docker's rule, where a compose `entrypoint` also drops the
    image's CMD."""
    if pending.entrypoint is not None:
        return [*pending.entrypoint, *(pending.command or [])]
    return [*(image_entrypoint or []), *(pending.command if pending.command is not None else image_cmd or [])]


def with_startup(rendered: RenderedDeployment, commands: list[str], main: list[str]) -> RenderedDeployment:
    """The app service runs `commands`, then `main`; the compose file is planned again."""
    compose = {**rendered.compose, "services": dict(rendered.compose["services"])}
    compose["services"]["app"] = {**compose["services"]["app"], **_escape(_startup(commands, main))}
    files = {**rendered.files, rendered.compose_file: dump_compose(compose)}
    return RenderedDeployment(rendered.compose_file, compose, files, rendered.rename, rendered.repository_owned)


def _startup(commands: list[str], main: list[str]) -> dict[str, list[str]]:
    """The app's entrypoint and command when startup_commands are set: the commands run in order (`set -e`: the
    first failure stops the container), then the main process, given as arguments, is exec'd unchanged."""
    return {"entrypoint": ["/bin/sh", "-c", "\n".join(["set -e", *commands, 'exec "$@"']), "preview-startup"],
            "command": list(main)}


def make_context(
    owner: str, repo: str, pr_number: int, app_host_port: int, db_host_port: int, password_key: bytes | None,
    image_overrides: dict[str, str] | None = None,
) -> RenderContext:
    """`password_key` None: the password is shown as a placeholder (`preview-orchestrator render`)."""
    slug = project_slug(owner, repo)
    deployment = make_deployment_id(slug, pr_number)
    # Stable across updates (the database volume keeps it), unique per deployment, not guessable by a PR.
    password = (PASSWORD_PLACEHOLDER if password_key is None
                else hmac.new(password_key, f"{deployment}:db".encode(), hashlib.sha256).hexdigest()[:24])
    return RenderContext(
        owner=owner, repo=repo, project_slug=slug, pr_number=pr_number, deployment_id=deployment,
        app_host_port=app_host_port, db_host_port=db_host_port, db_password=password,
        image_overrides=image_overrides or {},
        secret_key=None if password_key is None else password_key.decode("latin-1"),
    )


def render_deployment(
    host: PluginHost, repo_dir: Path, config: PreviewConfig, context: RenderContext,
    normalize: Normalizer | None = None,
) -> RenderedDeployment:
    """Plan the files of a deploy; reads the checkout, writes nothing. Raises ConfigError.

    `normalize` runs `docker compose config` on a repository-owned compose file; without it such a file
    cannot be judged and is refused."""
    present = [name for name in REPO_COMPOSE_NAMES if os.path.lexists(repo_dir / name)]
    if len(present) == 2:
        raise ConfigError([f"{REPO_COMPOSE_NAMES[0]} and {REPO_COMPOSE_NAMES[1]} both exist; keep one"])
    if present:
        return _repository_owned(host, repo_dir, present[0], config, context, normalize)
    return _generated(host, repo_dir, config, context)


def write_rendered(repo_dir: Path, rendered: RenderedDeployment) -> Path:
    """Write the planned files into the work directory; returns the compose file to run. Nothing is written
    through a link the repository placed at one of these names (see checkout_paths.write_new)."""
    if rendered.rename:
        source, target = rendered.rename
        os.replace(repo_dir / source, repo_dir / target)
    for name, text in rendered.files.items():
        write_new(repo_dir, name, text)
    return repo_dir / rendered.compose_file


def rewrite_compose(repo_dir: Path, rendered: RenderedDeployment) -> Path:
    """Write the compose file again (after `with_startup`), never through a link."""
    return write_new(repo_dir, rendered.compose_file, rendered.compose_text())


def dump_compose(compose: dict[str, Any]) -> str:
    return yaml.safe_dump(compose, sort_keys=False, default_flow_style=False, width=4096)


# Generated from plugins -----------------------------------------------------------------------


def _generated(
    host: PluginHost, repo_dir: Path, config: PreviewConfig, context: RenderContext
) -> RenderedDeployment:
    files: dict[str, str] = {}
    if config.dockerfile:
        dockerfile = config.dockerfile
    elif (repo_dir / "Dockerfile").is_file():
        ensure_inside(repo_dir, repo_dir / "Dockerfile", "Dockerfile")
        dockerfile = "Dockerfile"
    else:
        text = host.hook.po_dockerfile(framework=config.framework, config=config, context=context,
                                       project=ProjectFiles(repo_dir))
        if text is None:
            raise ConfigError([f"framework {config.framework} has no default Dockerfile; add a Dockerfile"])
        files[INJECTED_DOCKERFILE] = text
        dockerfile = INJECTED_DOCKERFILE

    app = _app_service(host, config, context, ProjectFiles(repo_dir))
    database = _database(host, config, context)
    extras = [_extra(host, name, context) for name in config.extra_services]

    environment: dict[str, str] = {}
    environment.update(app.service.get("environment") or {})
    environment.update(database.app_env)
    for extra in extras:
        environment.update(extra.app_env)
    environment.update(config.env_map)
    environment[config.app_port_env] = str(config.app_port)
    environment.setdefault("PORT", str(config.app_port))  # `$PORT` in app_entrypoint works whatever the variable

    app_service: dict[str, Any] = {
        **{k: v for k, v in app.service.items() if k != "environment"},
        "build": {"context": ".", "dockerfile": dockerfile},
        "container_name": context.container_name("app"),
        "environment": environment,
        "ports": [f"127.0.0.1:{context.app_host_port}:{config.app_port}"],
        "depends_on": {"db": {"condition": "service_healthy"}},
        "restart": "no",
    }
    if config.env_file:
        app_service["env_file"] = [config.env_file]
    pending = None
    if config.startup_commands and dockerfile == INJECTED_DOCKERFILE:
        app_service.update(_startup(config.startup_commands, app.command))
    elif config.startup_commands:  # the repository's Dockerfile: its image says what the main process is
        pending = PendingStartup(config.startup_commands, image=f"{context.deployment_id}-app")

    db_port = host.provided.databases[config.database].port
    db_service = {
        **database.service,
        "container_name": context.container_name("db"),
        "ports": [f"127.0.0.1:{context.db_host_port}:{db_port}"],
    }
    services: dict[str, Any] = {"app": app_service, "db": db_service}
    volumes: dict[str, Any] = dict(database.volumes)
    for extra in extras:
        for name, service in extra.services.items():
            if name in services:
                raise ConfigError([f"extra_services is not valid (two services named {name})"])
            services[name] = {**service, "container_name": context.container_name(name)}
            healthy = "healthcheck" in service
            app_service["depends_on"][name] = {"condition": "service_healthy" if healthy else "service_started"}
        volumes.update(extra.volumes)

    compose: dict[str, Any] = {"name": context.deployment_id, "services": services}
    if volumes:
        compose["volumes"] = volumes
    _apply_common(compose, context)
    escaped = _escape(compose)
    return RenderedDeployment(
        compose_file=GENERATED_COMPOSE,
        compose=escaped,
        files={**files, GENERATED_COMPOSE: dump_compose(escaped)},
        pending_startup=pending,
    )


def _app_service(host: PluginHost, config: PreviewConfig, context: RenderContext,
                 project: ProjectFiles) -> AppService:
    answer = host.hook.po_app_service(framework=config.framework, config=config, context=context, project=project)
    if answer is None:
        raise ConfigError([f"framework {config.framework} has no app service; a plugin is missing"])
    return AppService.model_validate(answer)


def _database(host: PluginHost, config: PreviewConfig, context: RenderContext) -> DatabaseWiring:
    answer = host.hook.po_database(database=config.database, context=context)
    if answer is None:
        raise ConfigError([f"database {config.database} has no service; a plugin is missing"])
    return DatabaseWiring.model_validate(answer)


def _extra(host: PluginHost, name: str, context: RenderContext) -> ServiceWiring:
    answer = host.hook.po_extra_service(service=name, context=context)
    if answer is None:
        raise ConfigError([f"extra service {name} has no template; a plugin is missing"])
    return ServiceWiring.model_validate(answer)


def _apply_common(compose: dict[str, Any], context: RenderContext) -> None:
    """Labels on everything, and the spec's limits on every service."""
    labels = {DEPLOYMENT_LABEL: context.deployment_id}
    for service in compose["services"].values():
        existing = service.get("labels") or {}
        if isinstance(existing, list):
            existing = dict(item.split("=", 1) if "=" in item else (item, "") for item in existing)
        service["labels"] = {**existing, **labels}
        deploy = service.get("deploy") if isinstance(service.get("deploy"), dict) else {}
        service["deploy"] = {**deploy, "resources": RESOURCES}
    networks = compose.get("networks") or {}
    networks.setdefault("default", {})
    for name, network in list(networks.items()):
        network = network if isinstance(network, dict) else {}
        network["labels"] = {**_as_dict(network.get("labels")), **labels}
        networks[name] = network
    compose["networks"] = networks
    volumes = compose.get("volumes") or {}
    for name, volume in list(volumes.items()):
        volume = volume if isinstance(volume, dict) else {}
        volume["labels"] = {**_as_dict(volume.get("labels")), **labels}
        volumes[name] = volume
    if volumes:
        compose["volumes"] = volumes


def _as_dict(labels: Any) -> dict[str, str]:
    if isinstance(labels, dict):
        return {str(k): str(v) for k, v in labels.items()}
    if isinstance(labels, list):
        return dict(str(item).split("=", 1) if "=" in str(item) else (str(item), "") for item in labels)
    return {}


def _escape(value: Any) -> Any:
    """Escape compose interpolation (`$` → `$$`) in every string of a compose file we generate."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_escape(item) for item in value]
    if isinstance(value, dict):
        return {key: _escape(item) for key, item in value.items()}
    return value


# Repository-owned compose.preview.yml ---------------------------------------------------------


def _repository_owned(
    host: PluginHost, repo_dir: Path, name: str, config: PreviewConfig, context: RenderContext,
    normalize: Normalizer | None,
) -> RenderedDeployment:
    path = repo_dir / name
    ensure_inside(repo_dir, path, name)
    try:
        raw = load_untrusted_yaml(path.read_bytes(), name, max_bytes=MAX_COMPOSE_BYTES)
    except YamlRejected as exc:
        raise ConfigError([str(exc)]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{name} must be a mapping"])
    problems = raw_problems(raw, repo_dir, name)
    services = raw.get("services") if isinstance(raw.get("services"), dict) else {}
    if "app" not in services:
        problems.append(f"{name}: a service named app is required")
    if problems:
        raise ConfigError(problems)
    if normalize is None:
        raise ConfigError([f"{name} can only be judged with docker compose (compose v2) installed"])
    # From here on, only compose's own reading of the file counts: interpolated, defaults applied.
    compose = normalize(path, context.deployment_id)
    problems = normalized_problems(compose, repo_dir, context.deployment_id, name)
    if problems:
        raise ConfigError(problems)
    services = compose["services"]

    app = services["app"]
    app["container_name"] = context.container_name("app")
    app["ports"] = [f"127.0.0.1:{context.app_host_port}:{config.app_port}"]
    environment = _environment_dict(app.get("environment"))
    environment.update(_escape(config.env_map))
    environment[config.app_port_env] = str(config.app_port)
    environment.setdefault("PORT", str(config.app_port))
    app["environment"] = environment
    if config.env_file:
        existing = app.get("env_file") or []
        app["env_file"] = [*(existing if isinstance(existing, list) else [existing]), config.env_file]
    pending = None
    if config.startup_commands:
        pending = PendingStartup(
            config.startup_commands, image=app.get("image") or f"{context.deployment_id}-app",
            entrypoint=_unescape(app.get("entrypoint")), command=_unescape(app.get("command")))
    if isinstance(services.get("db"), dict):
        db_port = host.provided.databases[config.database].port
        services["db"]["container_name"] = context.container_name("db")
        services["db"]["ports"] = [f"127.0.0.1:{context.db_host_port}:{db_port}"]
    compose["name"] = context.deployment_id
    _apply_common(compose, context)
    return RenderedDeployment(
        compose_file=REPO_COMPOSE_OUTPUT,
        compose=compose,
        files={REPO_COMPOSE_OUTPUT: dump_compose(compose)},
        rename=("compose.preview.yaml", "compose.preview.yml") if name.endswith(".yaml") else None,
        repository_owned=True,
        pending_startup=pending,
    )


def _unescape(value: Any) -> list[str] | None:
    """A command list from `docker compose config` (which prints a literal `$` as `$$`), as the process sees it."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    return [str(item).replace("$$", "$") for item in items]


def _environment_dict(environment: Any) -> dict[str, Any]:
    if isinstance(environment, dict):
        return {str(k): v for k, v in environment.items()}
    if isinstance(environment, list):
        result: dict[str, Any] = {}
        for item in environment:
            key, sep, value = str(item).partition("=")
            result[key] = value if sep else None
        return result
    return {}
