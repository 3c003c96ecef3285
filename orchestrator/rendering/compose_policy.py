"""What a pull request's own compose file may do: an allow-list, applied twice.

1. To the raw document, before compose reads anything: only known top-level and service options, and the
   files compose reads while it normalises (`env_file`) must be literal paths inside the repository, so that
   no `${VAR:-/etc/...}` default can make compose read a host file.
2. To the form compose will really run: the output of `docker compose config` in the same clean
   environment, where `${R:-/}` has become `/`, short syntax has become long syntax and every path is
   absolute. Each option a preview may use is listed with what it may hold; anything else is refused.

Each refusal names the service and the option, so the author knows what to change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.common.checkout_paths import inside
from orchestrator.common.labels import SERVICE_LABEL_PREFIX
from orchestrator.plugin_api.types import BUILT_IMAGES
from orchestrator.rendering.compose_allowlist import (
    ALLOWED_ULIMITS,
    BUILD_OPTIONS,
    BUILD_REFUSED_BECAUSE,
    DEPLOY_OPTIONS,
    DOCKER_SOCKET_HINTS,
    FILE_OBJECT_OPTIONS,
    NETWORK_OPTIONS,
    SERVICE_OPTIONS,
    TOP_LEVEL,
    VOLUME_OPTIONS,
    why_refused,
    why_refused_top,
)
from orchestrator.rendering.compose_document import PIDS_LIMIT
from orchestrator.rendering.dockerfile_policy import IMAGE_ID, MAX_DOCKERFILE_BYTES, names_built_images


def raw_problems(document: dict[str, Any], repo_dir: Path, file_name: str) -> list[str]:
    """The checks that must hold before compose may read the file at all."""
    problems = [f"{file_name}: top-level {key} is not allowed ({why_refused(key, 'top-level')})"
                for key in document if not _extension(key) and key not in TOP_LEVEL]
    services = document.get("services")
    if not isinstance(services, dict) or not services:
        return [*problems, f"{file_name}: services must be a mapping with at least the service app"]
    for name, service in services.items():
        where = f"{file_name}: service {name}"
        if not isinstance(service, dict):
            problems.append(f"{where} must be a mapping")
            continue
        problems += [f"{where}: {option} is not allowed ({why_refused(option)})"
                     for option in service if not _extension(option) and option not in SERVICE_OPTIONS]
        for path in _env_file_paths(service.get("env_file")):
            if "$" in path:
                problems.append(f"{where}: env_file must be a literal path (no ${{...}}), it is read by compose")
            elif not inside(repo_dir, path):
                problems.append(f"{where}: env_file outside the repository is not allowed")
    return problems


def normalized_problems(document: dict[str, Any], repo_dir: Path, project: str, file_name: str) -> list[str]:
    """The allow-list applied to `docker compose config` output (interpolated, long syntax, absolute paths)."""
    problems: list[str] = []
    services: dict[str, Any] = document.get("services") or {}
    top = {kind: document.get(kind) or {} for kind in ("networks", "volumes", "configs", "secrets")}
    for kind, allowed in (("networks", NETWORK_OPTIONS), ("volumes", VOLUME_OPTIONS),
                          ("configs", FILE_OBJECT_OPTIONS), ("secrets", FILE_OBJECT_OPTIONS)):
        for key, definition in top[kind].items():
            problems += [f"{file_name}: {kind} {key}: {p}"
                         for p in _top_level_problems(kind, str(key), definition or {}, allowed, repo_dir, project)]
    for name, service in services.items():
        where = f"{file_name}: service {name}"
        problems += [f"{where}: {p}" for p in _service_problems(str(name), service, services, top, repo_dir)]
    return problems


def _top_level_problems(kind: str, key: str, definition: dict[str, Any], allowed: frozenset[str],
                        repo_dir: Path, project: str) -> list[str]:
    problems = [f"{option} is not allowed ({why_refused_top(kind, option)})"
                for option, value in definition.items()
                if option not in allowed and not _extension(option) and value not in (None, False, {}, [])]
    if definition.get("name", f"{project}_{key}") != f"{project}_{key}":
        problems.append(f"name {str(definition['name'])[:80]} is not allowed "
                        f"(joins a {kind[:-1]} outside this preview)")
    driver = definition.get("driver")
    if kind == "networks" and driver not in (None, "bridge"):
        problems.append(f"driver {driver} is not allowed")
    if kind == "volumes" and driver not in (None, "local"):
        problems.append(f"driver {driver} is not allowed")
    ipam = definition.get("ipam") or {}
    if kind == "networks" and any(value not in (None, {}, []) for value in ipam.values()):
        problems.append("ipam is not allowed (addresses are Docker's to choose)")
    source = definition.get("file")
    if source is not None and not inside(repo_dir, str(source)):
        problems.append("file is not allowed outside the repository")
    return problems + _own_labels(definition)


def _own_labels(definition: dict[str, Any]) -> list[str]:
    """The service's labels (SERVICE_LABEL_PREFIX) tell it what is its own: a preview's resources, a seed, a seed's
    layer, a copy in progress. A file that set one could have the service take its volume for one of those."""
    problems = []
    for where, holder in (("labels", definition), ("build labels", definition.get("build")),
                          ("deploy labels", definition.get("deploy"))):
        labels = holder.get("labels") if isinstance(holder, dict) else None
        keys = labels if isinstance(labels, dict) else [str(item).split("=", 1)[0] for item in labels or []]
        problems += [f"{where}: {str(key)[:80]} is not allowed ({SERVICE_LABEL_PREFIX}* labels are the service's "
                     "own)" for key in keys if str(key).lower().startswith(SERVICE_LABEL_PREFIX)]
    return problems


def _service_problems(name: str, service: dict[str, Any], services: dict[str, Any], top: dict[str, Any],
                      repo_dir: Path) -> list[str]:
    problems = [f"{option} is not allowed ({why_refused(option)})" for option, value in service.items()
                if option not in SERVICE_OPTIONS and not _extension(option) and value not in (None, False)]
    problems += _own_labels(service)
    build = service.get("build")
    image = str(service.get("image") or "")
    if names_built_images(image):
        problems.append(f"image {image[:80]} is not allowed ({BUILT_IMAGES}/ holds the images built for previews)")
    elif IMAGE_ID.fullmatch(image):
        problems.append(f"image {image[:80]} is not allowed (an image id, or a prefix of one, names whatever image "
                        "the host has: use a name)")
    if build is not None:
        problems += _build_problems(build, repo_dir)
        if service.get("image"):
            problems.append("image beside build is not allowed (the built image would replace that image for "
                            "every preview on the host)")
    if name not in ("app", "db"):
        problems += [f"{option} is not allowed (only app and db get host ports and fixed names)"
                     for option in ("ports", "container_name") if service.get(option)]
    for volume in service.get("volumes") or []:
        if (problem := _volume_problem(volume, top["volumes"], repo_dir)) is not None:
            problems.append(f"volumes: {problem}")
    for network in service.get("networks") or {}:
        if network not in top["networks"]:
            problems.append(f"networks: {str(network)[:60]} is not a network of this file")
    for kind in ("configs", "secrets"):
        for reference in service.get(kind) or []:
            source = reference.get("source") if isinstance(reference, dict) else reference
            if source not in top[kind]:
                problems.append(f"{kind}: {str(source)[:60]} is not defined in this file")
    problems += _namespace_problems(service, services)
    problems += _deploy_problems(service)
    problems += _bound_problems(service)
    driver = (service.get("logging") or {}).get("driver")
    if driver not in (None, "json-file", "local"):
        problems.append(f"logging driver {driver} is not allowed (logs stay with Docker)")
    for option in service.get("security_opt") or []:
        if str(option).replace("=", ":") not in ("no-new-privileges", "no-new-privileges:true"):
            problems.append(f"security_opt {str(option)[:60]} is not allowed (weakens container confinement)")
    for hook in (service.get("post_start") or []) + (service.get("pre_stop") or []):
        if isinstance(hook, dict) and hook.get("privileged"):
            problems.append("a privileged post_start or pre_stop hook is not allowed")
    for path in _env_file_paths(service.get("env_file")):
        if not inside(repo_dir, path):
            problems.append("env_file outside the repository is not allowed")
    return problems


def _build_problems(build: Any, repo_dir: Path) -> list[str]:
    if not isinstance(build, dict):
        return ["build must be a mapping"]
    problems = [f"build {option} is not allowed ({BUILD_REFUSED_BECAUSE.get(option, 'not needed by a preview')})"
                for option, value in build.items() if option not in BUILD_OPTIONS and value not in (None, False)]
    context = str(build.get("context", ""))
    if not context.startswith("/") or not inside(repo_dir, context):
        problems.append("build context must be a directory of the repository (not a URL or a path outside it)")
    elif build.get("dockerfile") and not inside(repo_dir, str(Path(context) / str(build["dockerfile"]))):
        problems.append("build dockerfile outside the repository is not allowed")
    inline, args = str(build.get("dockerfile_inline") or ""), build.get("args") or {}
    if len(inline.encode()) > MAX_DOCKERFILE_BYTES:
        problems.append(f"build dockerfile_inline is larger than {MAX_DOCKERFILE_BYTES // 1024} KiB")
    # BUILDKIT_SYNTAX and the like choose BuildKit's frontend or its behaviour: a frontend image of the pull
    # request's choosing would build whatever it likes, past every check of the Dockerfile.
    names = args.keys() if isinstance(args, dict) else [str(a).split("=", 1)[0] for a in args]
    if any(str(name).upper().startswith("BUILDKIT_") for name in names):
        problems.append("build args BUILDKIT_* are not allowed (they choose BuildKit's frontend)")
    if names_built_images(inline) or any(names_built_images(str(v)) for v in
                                           (args.values() if isinstance(args, dict) else args)):
        problems.append(f"build may not name {BUILT_IMAGES}/ (it holds the images built for previews)")
    if build.get("network") not in (None, "default", "none"):
        problems.append(f"build network {str(build['network'])[:40]} is not allowed (a build keeps its own network)")
    return problems


def _volume_problem(volume: Any, volumes: dict[str, Any], repo_dir: Path) -> str | None:
    if not isinstance(volume, dict):
        return "must be in compose's long form"
    kind, source = volume.get("type"), str(volume.get("source") or "")
    if any(hint in source for hint in DOCKER_SOCKET_HINTS):
        return "the Docker socket is not allowed"
    if kind == "tmpfs":
        return None
    if kind == "volume":
        if source and source not in volumes:
            return f"volume {source[:60]} is not defined in this file"
        return None
    if kind != "bind":
        return f"type {kind} is not allowed"
    if not inside(repo_dir, source):
        return f"bind mount of {source[:80]} is not allowed (outside the work directory)"
    if not volume.get("read_only"):
        return f"bind mount of {_relative(repo_dir, source)} must be read-only (add :ro; use a volume for data)"
    if (volume.get("bind") or {}).get("propagation") not in (None, "private", "rprivate"):
        return "bind propagation is not allowed (mounts would cross into the host)"
    return None


def _namespace_problems(service: dict[str, Any], services: dict[str, Any]) -> list[str]:
    problems = []
    for option, private in (("ipc", ("private", "shareable", "none")), ("pid", ())):
        value = service.get(option)
        if value not in (None, "", *private) and not _own_service(value, services):
            problems.append(f"{option}: {str(value)[:40]} is not allowed (shares the host's or another "
                            f"container's {option} namespace)")
    mode = service.get("network_mode")
    if mode not in (None, "", "none") and not _own_service(mode, services):
        problems.append(f"network_mode {str(mode)[:40]} is not allowed (a preview keeps its own network)")
    return problems


def _deploy_problems(service: dict[str, Any]) -> list[str]:
    problems = []
    deploy = service.get("deploy") or {}
    problems += [f"deploy {option} is not allowed" for option, value in deploy.items()
                 if option not in DEPLOY_OPTIONS and value not in (None, {}, [])]
    if deploy.get("placement"):
        problems.append("deploy placement is not allowed")
    if deploy.get("mode") not in (None, "replicated"):
        problems.append(f"deploy mode {deploy['mode']} is not allowed")
    for option, count in (("scale", service.get("scale")), ("deploy replicas", deploy.get("replicas"))):
        if count is not None and count != 1:
            problems.append(f"{option} {count} is not allowed (one container per service: the limits apply to each)")
    return problems


def _bound_problems(service: dict[str, Any]) -> list[str]:
    """pids_limit may only lower PIDS_LIMIT; ulimits only those of ALLOWED_ULIMITS, up to their ceilings."""
    problems = []
    limit = service.get("pids_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= PIDS_LIMIT):
        problems.append(f"pids_limit {str(limit)[:20]} is not allowed (at most {PIDS_LIMIT}, the service's bound)")
    ulimits = service.get("ulimits") or {}
    if not isinstance(ulimits, dict):
        return [*problems, "ulimits must be a mapping"]
    for name, value in ulimits.items():
        ceiling = ALLOWED_ULIMITS.get(str(name))
        if ceiling is None:
            problems.append(f"ulimits {str(name)[:30]} is not allowed (only {', '.join(ALLOWED_ULIMITS)} may be set)")
            continue
        values = [value.get("soft"), value.get("hard")] if isinstance(value, dict) else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= ceiling for v in values):
            problems.append(f"ulimits {name} must be between 0 and {ceiling}")
    return problems


def _own_service(value: Any, services: dict[str, Any]) -> bool:
    text = str(value)
    return text.startswith("service:") and text.removeprefix("service:") in services


def _env_file_paths(value: Any) -> list[str]:
    entries = value if isinstance(value, list) else [] if value is None else [value]
    return [str(entry.get("path", "")) if isinstance(entry, dict) else str(entry) for entry in entries]


def _extension(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("x-")


def _relative(repo_dir: Path, path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(repo_dir.resolve())) or "."
    except ValueError:
        return path[:80]

