"""What a compose file the service wrote says (never the repository's raw file, which the compose policy judges
first): its services, those that run an image as it is, their declared containers, the database's volumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.plugin_api import DatabaseSeed
from orchestrator.runtime.compose_cli import Container
from orchestrator.runtime.database_seeds import volume_name


def prebuilt_services(compose_file: Path) -> list[str]:
    """Services of a compose file the service wrote (never the repository's raw file) that run an image
    as it is: everything but the app and what is built."""
    return [name for name, service in compose_services(compose_file).items()
            if name != "app" and isinstance(service, dict) and "build" not in service and service.get("image")]


def built_images(compose_file: Path) -> list[str]:
    """The images the compose file builds (each built service's `image:`, which the renderer always gives); none
    when the file cannot be read."""
    try:
        services = compose_services(compose_file)
    except (OSError, yaml.YAMLError):
        return []
    return [str(service["image"]) for service in services.values()
            if isinstance(service, dict) and "build" in service and service.get("image")]


def started_early(containers: list[Container], compose_file: Path) -> list[Container] | None:
    """The containers of every service but the app, when `start_dependencies` created them all (none is built,
    none is left over from an earlier compose file); else None."""
    dependencies = [c for c in containers if c.service != "app"]
    wanted = set(compose_services(compose_file)) - {"app"}
    if wanted != set(prebuilt_services(compose_file)) or {c.service for c in dependencies} != wanted:
        return None
    return dependencies


def declared_containers(compose_file: Path, services: list[str]) -> list[Container] | None:
    """`services` as the compose file declares their containers (name, healthcheck); None unless each has a
    `container_name` (every file the service generates gives one)."""
    declared = compose_services(compose_file)
    found = []
    for name in services:
        service = declared.get(name) or {}
        if not service.get("container_name"):
            return None
        test = (service.get("healthcheck") or {}).get("test")
        healthcheck = ["CMD-SHELL", test] if isinstance(test, str) else [str(t) for t in test] if test else None
        found.append(Container(str(service["container_name"]), name, healthcheck))
    return found


def compose_services(compose_file: Path) -> dict[str, Any]:
    document = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    return dict(document.get("services") or {})


def seed_volume(compose_file: Path, seed: DatabaseSeed) -> tuple[dict[str, Any], str] | None:
    """The compose file's declaration of the seed's volume and the db service's image, when the volume is the
    preview's own (not external, the local driver); None otherwise."""
    document = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    volume = (document.get("volumes") or {}).get(seed.volume)
    image = ((document.get("services") or {}).get("db") or {}).get("image")
    if not isinstance(volume, dict) or volume.get("external") or volume.get("driver") or not image:
        return None
    return volume, str(image)


def database_volumes(compose_file: Path, deployment_id: str) -> list[str] | None:
    """The engine's names of the `db` service's named volumes that are the preview's own (declared in the file,
    not external); None when the file has no `db` service. OSError or yaml.YAMLError when it cannot be read."""
    document = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    services = document.get("services") if isinstance(document, dict) else None
    database = services.get("db") if isinstance(services, dict) else None
    if not isinstance(database, dict):
        return None
    declared = document.get("volumes") or {}
    wanted = []
    for mount in database.get("volumes") or []:
        source = mount.get("source") if isinstance(mount, dict) else str(mount).split(":", 1)[0]
        if isinstance(source, str) and isinstance(declared, dict) and source in declared:
            volume = declared[source] if isinstance(declared[source], dict) else {}
            if not volume.get("external"):
                wanted.append(volume_name(deployment_id, source, volume))
    return wanted
