"""A compose file generated from the plugins: the framework's app service and Dockerfile (injected when the
repository has none), the database, the extra services, then what every app gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.plugin_api.preview_config import ConfigError, PreviewConfig, ensure_inside
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.plugin_api.types import RenderContext
from orchestrator.rendering.compose_document import (
    GENERATED_COMPOSE,
    INJECTED_DOCKERFILE,
    PendingStartup,
    RenderedDeployment,
    apply_common,
    dump_compose,
    escape,
)
from orchestrator.rendering.dockerfile_cache import injected_problems, keyed_dockerfile
from orchestrator.rendering.dockerfile_variables import NATIVE_PLATFORM
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.rendering.startup import startup_service


def generated(
    host: PluginHost, repo_dir: Path, config: PreviewConfig, context: RenderContext
) -> RenderedDeployment:
    files: dict[str, str] = {}
    # Whether the service wrote the Dockerfile: never told by its name, which a repository's file may have
    # (`dockerfile: Dockerfile.preview-orchestrator`), and every Dockerfile the service did not write is checked.
    injected = False
    if config.dockerfile:
        dockerfile = config.dockerfile
    elif (repo_dir / "Dockerfile").is_file():
        ensure_inside(repo_dir, repo_dir / "Dockerfile", "Dockerfile")
        dockerfile = "Dockerfile"
    else:
        text = host.dockerfile(config.framework, config, context, ProjectFiles(repo_dir))
        if text is None:
            raise ConfigError([f"framework {config.framework} has no default Dockerfile; add a Dockerfile"])
        if problems := injected_problems(text, context, f"the {config.framework} framework's Dockerfile"):
            raise ConfigError(problems)
        files[INJECTED_DOCKERFILE] = text
        dockerfile, injected = INJECTED_DOCKERFILE, True

    build_files: dict[str, str] = {}
    if not injected:
        dockerfile = keyed_dockerfile(repo_dir, repo_dir / dockerfile, "app.Dockerfile", dockerfile, context,
                                      build_files, platform=NATIVE_PLATFORM)  # the generated compose sets none
    app = host.app_service(config.framework, config, context, ProjectFiles(repo_dir))
    database = host.database(config.database, context)
    extras = [host.extra_service(name, context) for name in config.extra_services]

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
    if config.startup_commands and injected:
        app_service.update(startup_service(config.startup_commands, app.command))
    elif config.startup_commands:  # the repository's Dockerfile: its image says what the main process is
        pending = PendingStartup(config.startup_commands, image=context.built_image("app"))

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
    apply_common(compose, context)
    escaped = escape(compose)
    return RenderedDeployment(
        compose_file=GENERATED_COMPOSE,
        compose=escaped,
        files={**files, GENERATED_COMPOSE: dump_compose(escaped)},
        pending_startup=pending,
        seed=database.seed,
        build_files=build_files,
    )

