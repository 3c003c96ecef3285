"""A swarm preview's images into SWARM_REGISTRY, where its node pulls them: the built ones under the deployment
(a tag per content, so a push that changes nothing of a service does not restart it), the `image:` ones into the
registry's shared mirror (registry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.plugin_api import CommandFailed, DeploymentLog, FlowControl
from orchestrator.runtime.compose_cli import Compose
from orchestrator.runtime.swarm.cli import SwarmCli
from orchestrator.runtime.swarm.gc import PushGate
from orchestrator.runtime.swarm.registry import Registry


class ImagePush:
    def __init__(self, cli: SwarmCli, compose: Compose, registry: Registry, gate: PushGate) -> None:
        self.cli = cli
        self.compose = compose
        self.registry = registry
        self.gate = gate  # pushes share it; the registry's garbage collection holds it alone

    def every_image(self, deployment_id: str, compose_file: Path, log: DeploymentLog,
              control: FlowControl) -> dict[str, str]:
        """Every image of the preview into the registry: the built ones under the deployment, the `image:` ones
        into the shared mirror (the nodes need nothing but SWARM_REGISTRY)."""
        document = self.compose.normalized(compose_file, deployment_id)
        images: dict[str, str] = {}
        with self.gate.pushing(control, log):
            for name, service in (document.get("services") or {}).items():
                images[name] = self._one(deployment_id, compose_file, name, service, log, control)
        return images

    def _one(self, deployment_id: str, compose_file: Path, name: str, service: dict[str, Any],
                  log: DeploymentLog, control: FlowControl) -> str:
        """One service's image into the registry: a built one under the deployment, an `image:` one into the
        shared mirror."""
        built = service.get("build") is not None
        local = service.get("image") or f"{deployment_id}-{name}"  # compose's name for a built image
        ident = self._image_id(local)
        if ident is None:
            self.compose.pull(deployment_id, compose_file, name, log, control)
            ident = self._image_id(local) or ""
        tag = ident.removeprefix("sha256:")[:12]
        reference = (self.registry.reference(deployment_id, name, tag) if built
                     else self.registry.mirror_reference(local, tag))
        self.cli.docker(["tag", local, reference], log=log)
        self.cli.docker(["push", "--quiet", reference], log=log, timeout=1800, control=control)
        # Not kept on the manager: a later preview's `FROM` or `image:` of this name would find it there, without
        # the registry's credentials (the nodes pull it with them, for the stacks the service deploys).
        self.cli.docker(["image", "rm", "--no-prune", reference], log=log)
        return reference

    def _image_id(self, image: str) -> str | None:
        try:
            return self.cli.docker(["image", "inspect", "--format", "{{.Id}}", image], timeout=30).strip()
        except CommandFailed:
            return None
