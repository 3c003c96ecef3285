"""A stage of a preview's build kept as an image: a base preview's installed dependencies
(RenderContext.base_dependencies), tagged after its build so that its repository's pull requests can start from
them. The compose runtime builds with compose on the engine the next builds run on; the swarm runtime keeps none
(its previews build their dependencies from nothing)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from orchestrator.plugin_api import (
    DEPENDENCIES_LABEL,
    DEPENDENCIES_STAGE,
    Check,
    CommandFailed,
    DeploymentLog,
    FlowControl,
    KeptImage,
    RuntimeFailure,
    dump_compose,
)
from orchestrator.plugin_api.types import BUILT_IMAGES
from orchestrator.runtime.compose_cli import Compose, DockerResources


class KeptStages:
    """Runtime.keep_stage and Runtime.kept_image for a runtime that builds with compose on its own engine."""

    compose: Compose
    docker: DockerResources

    def keep_stage(self, deployment_id: str, compose_file: Path, service: str, stage: str, image: str,
                   log: DeploymentLog, control: FlowControl) -> None:
        keep_stage(self.compose, self.docker, deployment_id, compose_file, service, stage, image, log, control)

    def kept_image(self, image: str) -> KeptImage | None:
        return kept_image(self.docker, image)

    def kept_check(self) -> Check:
        return kept_check(self.docker)


def keep_stage(compose: Compose, docker: DockerResources, project: str, compose_file: Path, service: str, stage: str,
               image: str, log: DeploymentLog, control: FlowControl) -> None:
    """Build `service` once more to `stage` as `image`: every step is in the cache the build just filled, so this
    costs BuildKit's look at it. The compose file is the renderer's (the service's own), read as data. The image the
    name stood for before (the base preview's last commit's) is removed once nothing else names it."""
    before = _read(docker, image)
    try:
        document = yaml.safe_load(compose_file.read_text(encoding="utf-8"))
        build = dict(document["services"][service]["build"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise RuntimeFailure(f"The build's {stage} stage could not be kept", str(exc)) from None
    # absolute: the file that builds it is written elsewhere
    build["context"] = os.path.normpath(compose_file.parent / str(build.get("context", ".")))
    build["target"] = stage
    with tempfile.TemporaryDirectory(prefix="po-stage-") as scratch:
        staged = Path(scratch) / "compose.yml"
        staged.write_text(dump_compose({"services": {service: {"build": build, "image": image}}}), encoding="utf-8")
        try:
            compose.build(project, staged, log, control)
        except CommandFailed as exc:
            raise RuntimeFailure(f"The build's {stage} stage could not be kept", exc.tail()) from None
    after = _read(docker, image)
    if before is not None and after is not None and before.id != after.id:  # unread: nothing removed
        try:  # without --force: an image another tag or a container still uses stays
            docker.command(["image", "rm", before.id], log)
        except CommandFailed:
            pass


def kept_image(docker: DockerResources, image: str) -> KeptImage | None:
    """The local image `image`; None when the engine says it is absent, RuntimeFailure when it cannot say (down,
    timed out, an answer that does not parse): never taken for "absent"."""
    try:
        [found] = json.loads(docker.command(["image", "inspect", image]))
        labels = found["Config"].get("Labels") or {}
        return KeptImage(id=found["Id"], labels={k: v for k, v in labels.items() if isinstance(v, str)},
                         size_bytes=found.get("Size", 0))
    except CommandFailed as exc:
        if "no such image" in exc.output.lower():
            return None
        raise RuntimeFailure(f"The image {image} could not be read", exc.tail()) from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RuntimeFailure(f"The image {image} could not be read", str(exc)) from None


def _read(docker: DockerResources, image: str) -> KeptImage | None:
    """`kept_image`, for keep_stage's removal of the image the name stood for: unread is unknown, so nothing goes."""
    try:
        return kept_image(docker, image)
    except RuntimeFailure:
        return None


def kept_check(docker: DockerResources) -> Check:
    """doctor's line of the base previews' kept dependencies: how many, and their disk."""
    name = "kept dependencies (BASE_PREVIEWS)"
    try:
        ids = docker.command(["image", "ls", "--quiet", "--no-trunc", "--filter", f"label={DEPENDENCIES_LABEL}",
                              "--filter", f"reference={BUILT_IMAGES}/*-{DEPENDENCIES_STAGE}"]).split()
        sizes = docker.command(["image", "inspect", "--format", "{{.Size}}", *ids]).split() if ids else []
    except CommandFailed as exc:
        return Check(name, False, f"not listed: {exc}", "check the Docker engine")
    total = sum(int(size) for size in sizes if size.isdigit())
    whose = "base preview's" if len(ids) == 1 else "base previews'"
    return Check(name, True, f"{len(ids)} {whose} installed dependencies, {total / 2**20:.0f} MB, for their pull "
                             "requests to start from (removed with them)")
