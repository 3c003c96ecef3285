"""A base preview's installed dependencies, for its repository's pull requests (RenderContext.base_dependencies).

After a base preview's build, the DEPENDENCIES_STAGE of its injected Dockerfile is kept as an image when the
template labelled it (what it installed from); a pull request of the repository then renders with that image and
label, and its template decides whether to start from it (frameworks/nestjs: when its own manifests differ). Only
the service's own template is kept, never a repository's Dockerfile, and only the base preview's: a pull request's
build never writes what another one starts from. The image carries the base preview's deployment label, so it goes
with the base preview (and with every image its removal finds by that label)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from orchestrator.common.checkout_paths import write_new
from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.naming import BASE
from orchestrator.common.naming import deployment_id as make_deployment_id
from orchestrator.flows.context import FlowContext
from orchestrator.plugin_api.runtime import RuntimeFailure, WarmPool
from orchestrator.plugin_api.types import (
    DEPENDENCIES_LABEL,
    DEPENDENCIES_STAGE,
    BaseDependencies,
    RenderContext,
    kept_dependencies_image,
)
from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, RenderedDeployment
from orchestrator.state.records import PullRequestEvent

# The injected Dockerfile's stage, with the label inside it (before the next FROM)
_LABELLED_STAGE = re.compile(
    rf"^FROM \S+ AS {DEPENDENCIES_STAGE}\n(?:(?!FROM ).*\n)*?LABEL {re.escape(DEPENDENCIES_LABEL)}=", re.MULTILINE)


def to_keep(event: PullRequestEvent, context: RenderContext, rendered: RenderedDeployment) -> RenderedDeployment:
    """A base preview's `rendered` with the image its dependencies stage is to be kept as, when its injected
    Dockerfile has that stage labelled; anything else's as it is."""
    dockerfile = rendered.files.get(INJECTED_DOCKERFILE)
    if event.pr_number != BASE or dockerfile is None or not _LABELLED_STAGE.search(dockerfile):
        return rendered
    return replace(rendered, kept_dependencies=context.kept_dependencies())


def with_fallback(context: RenderContext, rendered: RenderedDeployment,
                  render: Callable[[RenderContext], RenderedDeployment]) -> RenderedDeployment:
    """A pull request's `rendered` whose injected Dockerfile starts FROM the base preview's kept dependencies, with
    that Dockerfile rendered without them (`render` of the context without the base preview's) for `build`: the
    image was looked up at the render, and its base preview may be removed before the build reads it."""
    base = context.base_dependencies
    dockerfile = rendered.files.get(INJECTED_DOCKERFILE, "")
    if base is None or not re.search(rf"^FROM {re.escape(base.image)} AS ", dockerfile, re.MULTILINE):
        return rendered
    without = render(context.model_copy(update={"base_dependencies": None})).files[INJECTED_DOCKERFILE]
    return replace(rendered, without_base=(base.image, without))


def build(c: FlowContext, event: PullRequestEvent, rendered: RenderedDeployment, work_dir: Path, compose_file: Path,
          log: DeploymentLog, control: FlowControl) -> None:
    """runtime.build; when it fails and the base preview's kept dependencies the Dockerfile starts FROM are gone
    (`with_fallback`), the Dockerfile rendered without them is written in its place and built: the pull request
    installs its dependencies from nothing rather than failing for what happened to another preview."""
    try:
        c.runtime.build(event.deployment_id, compose_file, log, control)
    except RuntimeFailure:
        if rendered.without_base is None or not _gone(c, rendered.without_base[0]):
            raise
        log.note("the base preview's installed dependencies are gone since the render (its base preview removed): "
                 "the build installs them from nothing")
        try:
            write_new(work_dir, INJECTED_DOCKERFILE, rendered.without_base[1])
        except OSError as exc:
            raise RuntimeFailure("Work directory cannot be written", str(exc.strerror)) from None
        c.runtime.build(event.deployment_id, compose_file, log, control)


def _gone(c: FlowContext, image: str) -> bool:
    """Whether the engine says `image` is absent; an engine that cannot say does not make a build failure its."""
    try:
        return c.runtime.kept_image(image) is None
    except RuntimeFailure:
        return False


def keep(c: FlowContext, event: PullRequestEvent, rendered: RenderedDeployment, compose_file: Path,
         log: DeploymentLog, control: FlowControl) -> None:
    """After the build: the stage `to_keep` named, tagged. A failure only costs the repository's pull requests an
    install from nothing, so it is noted, never raised."""
    if not rendered.kept_dependencies:
        return
    try:
        c.runtime.keep_stage(event.deployment_id, compose_file, "app", DEPENDENCIES_STAGE, rendered.kept_dependencies,
                             log, control)
    except RuntimeFailure as exc:
        log.note(f"{exc.message}: pull requests install their dependencies from nothing ({exc.detail[-300:]})")


def with_base(c: FlowContext, event: PullRequestEvent, context: RenderContext) -> RenderContext:
    """`context` with the repository's base preview's kept dependencies, when it has a base preview that kept
    them; a base preview's own context as it is."""
    if event.pr_number == BASE:
        return context
    base = c.store.read().deployments.get(make_deployment_id(event.project_slug, BASE))
    if base is None or base.repository != event.repository:
        return context
    image = context.kept_dependencies()
    try:
        kept = c.runtime.kept_image(image)
    except RuntimeFailure:  # the engine cannot say: the pull request installs from nothing, as without a base
        return context
    installed = None if kept is None else kept.labels.get(DEPENDENCIES_LABEL)
    if installed is None:
        return context
    return context.model_copy(update={"base_dependencies": BaseDependencies(image=image, installed=installed)})


def pools(c: FlowContext) -> list[WarmPool]:
    """Each base preview's kept dependencies, as the dashboard lists what is kept warm: one per base preview
    (BASE_PREVIEWS bounds them), not counted against SEED_CACHE_GB."""
    found = []
    for record in c.store.read().deployments.values():
        if record.prNumber != BASE:
            continue
        try:
            kept = c.runtime.kept_image(kept_dependencies_image(c.password_key(), record.repository))
        except RuntimeFailure:  # the engine cannot say: not listed, as on doctor's line
            continue
        if kept is not None and DEPENDENCIES_LABEL in kept.labels:
            found.append(WarmPool(repository=record.repository, kind="installed dependencies",
                                  detail="the base preview's, for its pull requests to install on top of",
                                  count=1, size_bytes=kept.size_bytes, used_at=None, bound="BASE_PREVIEWS"))
    return found
