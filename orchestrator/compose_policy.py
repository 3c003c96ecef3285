"""What a pull request's own compose file may not do: anything that reaches past its own containers.

Each refusal names the service and the option, so the author knows what to change.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

DOCKER_SOCKET_HINTS = ("docker.sock", "/var/run/docker", "/run/docker")
_HOST_NAMESPACES = {"pid": "pid", "ipc": "ipc", "uts": "uts", "userns_mode": "user",
                    "cgroup": "cgroup"}
_FORBIDDEN_OPTIONS = {
    "privileged": "gives the container full access to the host",
    "cap_add": "adds kernel capabilities",
    "devices": "exposes host devices",
    "device_cgroup_rules": "exposes host devices",
    "security_opt": "weakens container confinement",
    "volumes_from": "mounts another container's volumes",
    "cgroup_parent": "moves the container out of its own cgroup",
    "sysctls": "changes kernel parameters",
    "extends": "reads another file",
    "external_links": "links to containers outside the preview",
    "group_add": "adds host groups",
}
_TOP_LEVEL_FORBIDDEN = {"include": "reads other files"}


def policy_problems(compose: dict[str, Any], repo_dir: Path, file_name: str) -> list[str]:
    """Every reason `compose` may not run as a preview; empty when it may."""
    problems: list[str] = []
    for key, why in _TOP_LEVEL_FORBIDDEN.items():
        if key in compose:
            problems.append(f"{file_name}: top-level {key} is not allowed ({why})")
    services = compose.get("services")
    if not isinstance(services, dict) or not services:
        return [*problems, f"{file_name}: services must be a mapping with at least the service app"]
    for name, service in services.items():
        if not isinstance(service, dict):
            problems.append(f"{file_name}: service {name} must be a mapping")
            continue
        problems.extend(_service_problems(str(name), service, repo_dir, file_name))
    for kind in ("networks", "volumes", "configs", "secrets"):
        section = compose.get(kind) or {}
        if not isinstance(section, dict):
            problems.append(f"{file_name}: top-level {kind} must be a mapping")
            continue
        for name, definition in section.items():
            if not isinstance(definition, dict):
                continue
            if definition.get("external"):
                problems.append(f"{file_name}: {kind} {name}: external is not allowed (shared with the host)")
            if kind == "volumes" and definition.get("driver_opts"):
                problems.append(f"{file_name}: volumes {name}: driver_opts is not allowed (can bind host paths)")
            if kind == "networks" and definition.get("driver") in ("host", "macvlan", "ipvlan"):
                problems.append(f"{file_name}: networks {name}: driver {definition['driver']} is not allowed")
            source = definition.get("file")
            if source is not None and not _inside(repo_dir, str(source)):
                problems.append(f"{file_name}: {kind} {name}: file is not allowed outside the repository")
            if definition.get("environment") is not None and kind in ("configs", "secrets"):
                problems.append(f"{file_name}: {kind} {name}: environment is not allowed (reads host variables)")
    return problems


def _service_problems(name: str, service: dict[str, Any], repo_dir: Path, file_name: str) -> list[str]:
    problems = []
    where = f"{file_name}: service {name}"
    for option, why in _FORBIDDEN_OPTIONS.items():
        if option in service and service[option] not in (None, False, [], {}):
            problems.append(f"{where}: {option} is not allowed ({why})")
    for option, namespace in _HOST_NAMESPACES.items():
        value = str(service.get(option, ""))
        if value == "host" or value.startswith("container:"):
            problems.append(f"{where}: {option}: {value} is not allowed (shares the host's {namespace} namespace)")
    if name not in ("app", "db"):
        for option in ("ports", "container_name"):
            if service.get(option):
                problems.append(
                    f"{where}: {option} is not allowed (only app and db get host ports and fixed names)"
                )
    mode = service.get("network_mode")
    if mode is not None and mode != "none" and not str(mode).startswith("service:"):
        problems.append(f"{where}: network_mode {mode} is not allowed (a preview keeps its own network)")
    for volume in service.get("volumes") or []:
        problem = _volume_problem(volume, repo_dir)
        if problem:
            problems.append(f"{where}: volumes: {problem}")
    build = service.get("build")
    context = build.get("context", ".") if isinstance(build, dict) else build
    if context is not None and not _inside(repo_dir, str(context)):
        problems.append(f"{where}: build context outside the repository is not allowed")
    if isinstance(build, dict):
        if build.get("additional_contexts"):
            problems.append(f"{where}: build additional_contexts is not allowed")
        if build.get("network") == "host":
            problems.append(f"{where}: build network host is not allowed")
        if build.get("dockerfile") and not _inside(repo_dir, str(build["dockerfile"])):
            problems.append(f"{where}: build dockerfile outside the repository is not allowed")
    env_files = service.get("env_file") or []
    for entry in env_files if isinstance(env_files, list) else [env_files]:
        path = entry.get("path") if isinstance(entry, dict) else entry
        if path is not None and not _inside(repo_dir, str(path)):
            problems.append(f"{where}: env_file outside the repository is not allowed")
    return problems


def _volume_problem(volume: Any, repo_dir: Path) -> str | None:
    if isinstance(volume, dict):
        kind = volume.get("type", "volume")
        source = str(volume.get("source", ""))
        if kind == "bind" or (kind != "volume" and kind != "tmpfs"):
            return _bind_problem(source, repo_dir) if kind == "bind" else f"type {kind} is not allowed"
        return None
    text = str(volume)
    if any(hint in text for hint in DOCKER_SOCKET_HINTS):
        return "the Docker socket is not allowed"
    source = text.split(":", 1)[0] if ":" in text else ""
    if source.startswith((".", "/", "~")) or "/" in source:
        return _bind_problem(source, repo_dir)
    return None  # a named volume, or an anonymous one


def _bind_problem(source: str, repo_dir: Path) -> str | None:
    if any(hint in source for hint in DOCKER_SOCKET_HINTS):
        return "the Docker socket is not allowed"
    if not _inside(repo_dir, source):
        return f"bind mount of {source[:80]} is not allowed (outside the work directory)"
    return None


def _inside(repo_dir: Path, path: str) -> bool:
    if not path or path.startswith("~") or "$" in path:
        return False
    pure = PurePosixPath(path)
    if pure.is_absolute():
        candidate = Path(path)
    else:
        candidate = repo_dir / path
    try:
        return candidate.resolve().is_relative_to(repo_dir.resolve())
    except (OSError, RuntimeError):
        return False
