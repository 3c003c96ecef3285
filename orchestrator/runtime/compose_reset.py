"""`/preview reset-db` on the compose runtime: the preview's database volumes and containers removed, so that the
restart the flow runs next (flows/commands.py) starts the database from its seed again."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.plugin_api import CommandFailed, DeploymentLog, RuntimeFailure
from orchestrator.runtime.compose_cli import DockerResources
from orchestrator.runtime.database_seeds import DatabaseSeeds
from orchestrator.runtime.failures import failure
from orchestrator.runtime.seed_layers import holder_name, layer_volume
from orchestrator.runtime.written_compose import database_volumes


def reset_database(docker: DockerResources, copies: DatabaseSeeds | None, deployment_id: str, compose_file: Path,
                   log: DeploymentLog) -> list[str]:
    """`/preview reset-db` (ComposeRuntime.reset_database): the `db` service's volumes that the engine says are
    this deployment's (its label), whatever a file names, with the layers of layered copies, and the containers
    of `db` and `app`, removed."""
    try:
        wanted = database_volumes(compose_file, deployment_id)
    except (OSError, yaml.YAMLError) as exc:
        raise RuntimeFailure("The database could not be reset", f"{compose_file.name}: {exc}") from None
    if wanted is None:
        raise RuntimeFailure("This preview has no db service to reset")
    with failure("The database could not be reset"):
        own = set(docker.labelled("volume", deployment_id))
        names = [name for name in wanted if name in own]
        docker.remove([c.ident for c in docker.containers(deployment_id) if c.service in ("db", "app")], log)
        for name in names:
            try:
                docker.command(["rm", "--force", holder_name(name)], log, timeout=120)  # a layered copy's holder
            except CommandFailed:
                pass
            # What a layered copy wrote (it pins its seed until removed); one made before layers were labelled
            layer = copies.layer(name) if copies is not None else None
            layer = layer or (layer_volume(name) if layer_volume(name) in own else None)
            docker.command(["volume", "rm", "--force", name], log, timeout=120)
            if layer is not None:
                docker.command(["volume", "rm", "--force", layer], log, timeout=120)
    log.note(f"database reset: {', '.join(names) or 'no volume of its own'} removed")
    return names
