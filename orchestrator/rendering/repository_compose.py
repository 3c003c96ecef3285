"""A repository's own compose.preview.yml: judged by the compose policy twice (as written, then as compose
reads it), then given the preview's names, ports, environment and labels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.common.checkout_paths import inside
from orchestrator.common.safe_yaml import YamlRejected, load_untrusted_yaml
from orchestrator.plugin_api.preview_config import ConfigError, PreviewConfig, ensure_inside
from orchestrator.plugin_api.types import RenderContext
from orchestrator.rendering.compose_document import (
    MAX_COMPOSE_BYTES,
    REPO_COMPOSE_OUTPUT,
    Normalizer,
    PendingStartup,
    RenderedDeployment,
    apply_common,
    dump_compose,
    environment_dict,
    escape,
)
from orchestrator.rendering.compose_policy import normalized_problems, raw_problems
from orchestrator.rendering.dockerfile_cache import CacheMountRefused, keyed_cache_mounts, keyed_dockerfile
from orchestrator.rendering.dockerfile_policy import build_args, text_problems
from orchestrator.rendering.dockerfile_variables import NATIVE_PLATFORM
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.rendering.routed_services import declared_routes, unroutable


def repository_owned(
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
    routes, wrong = declared_routes(raw, name)
    problems += wrong
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
    problems += unroutable(routes, compose, name)
    build_files: dict[str, str] = {}
    for service_name, service in (compose.get("services") or {}).items():
        build = service.get("build") if isinstance(service, dict) else None
        shown = f"{name}: service {service_name}: its Dockerfile"
        if isinstance(build, dict) and _bake_template(build):
            problems.append(f"{name}: service {service_name}: build may not hold %{{ (buildx bake, which a host may "
                            "build with, would evaluate it as a template)")
            continue
        args = build_args(build.get("args")) if isinstance(build, dict) else {}
        # the engine's own platform, unless the file chooses one (then TARGETARCH and the like are its choice)
        chosen = (isinstance(service, dict) and service.get("platform")) or (isinstance(build, dict)
                                                                              and build.get("platforms"))
        platform = None if chosen else NATIVE_PLATFORM
        if isinstance(build, dict) and build.get("dockerfile_inline"):
            if found := text_problems(str(build["dockerfile_inline"]), shown, args, platform=platform):
                problems += found
                continue
            try:  # its cache mounts are the repository's own too
                inline = keyed_cache_mounts(str(build["dockerfile_inline"]), context.repository_cache_id, shown)
            except CacheMountRefused as exc:
                problems.append(str(exc))
            else:
                build["dockerfile_inline"] = inline if inline is not None else build["dockerfile_inline"]
        elif isinstance(build, dict):
            # as compose joins them: `..` cleaned as text (the build then reads the service's copy, below)
            dockerfile = Path(os.path.normpath(Path(str(build.get("context", repo_dir)))
                                               / str(build.get("dockerfile") or "Dockerfile")))
            if (dockerfile.exists() or dockerfile.is_symlink()) and not dockerfile.is_file():
                # a directory (or a link to one): BuildKit, failing to read it, reads `dockerfile` beside it instead
                problems.append(f"{shown} ({dockerfile.name}) is not a regular file")
                continue
            if dockerfile.name == "Dockerfile" and not dockerfile.exists():
                dockerfile = dockerfile.with_name("dockerfile")  # BuildKit's own fallback: it reads that one
            if not dockerfile.is_file() or not inside(repo_dir, str(dockerfile)):  # never a build it did not read
                problems.append(f"{shown} ({build.get('dockerfile') or 'Dockerfile'}) is not in the repository")
            else:
                try:  # read once, judged and copied: the build reads the bytes judged
                    build["dockerfile"] = keyed_dockerfile(repo_dir, dockerfile, f"{service_name}.Dockerfile", shown,
                                                           context, build_files, args, platform)
                except ConfigError as exc:
                    problems += exc.problems
    if problems:
        raise ConfigError(problems)
    services = compose["services"]

    app = services["app"]
    app["container_name"] = context.container_name("app")
    app["ports"] = [f"127.0.0.1:{context.app_host_port}:{config.app_port}"]
    environment = environment_dict(app.get("environment"))
    environment.update(escape(config.env_map))
    environment[config.app_port_env] = str(config.app_port)
    environment.setdefault("PORT", str(config.app_port))
    app["environment"] = environment
    if config.env_file:
        existing = app.get("env_file") or []
        app["env_file"] = [*(existing if isinstance(existing, list) else [existing]), config.env_file]
    pending = None
    if config.startup_commands:
        pending = PendingStartup(
            config.startup_commands, image=app.get("image") or context.built_image("app"),
            entrypoint=_unescape(app.get("entrypoint")), command=_unescape(app.get("command")))
    if isinstance(services.get("db"), dict):
        db_port = host.provided.databases[config.database].port
        services["db"]["container_name"] = context.container_name("db")
        services["db"]["ports"] = [f"127.0.0.1:{context.db_host_port}:{db_port}"]
    compose["name"] = context.deployment_id
    apply_common(compose, context)
    return RenderedDeployment(
        compose_file=REPO_COMPOSE_OUTPUT,
        compose=compose,
        files={REPO_COMPOSE_OUTPUT: dump_compose(compose)},
        rename=("compose.preview.yaml", "compose.preview.yml") if name.endswith(".yaml") else None,
        repository_owned=True,
        pending_startup=pending,
        build_files=build_files,
        routes=routes,
    )


def _unescape(value: Any) -> list[str] | None:
    """A command list from `docker compose config` (which prints a literal `$` as `$$`), as the process sees it."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    return [str(item).replace("$$", "$") for item in items]


def _bake_template(value: object) -> bool:
    """Whether a build section holds `%{` anywhere, or `${` in a name: buildx bake evaluates both (compose escapes
    `${` only in build arguments' values and dockerfile_inline)."""
    if isinstance(value, str):
        return "%{" in value
    if isinstance(value, dict):
        return any("%{" in str(key) or "${" in str(key) or _bake_template(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_bake_template(item) for item in value)
    return False
