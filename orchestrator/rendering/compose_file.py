"""From a checkout and its preview-config.yml to the exact compose file (and Dockerfile) a deploy runs.

Compose files are built as data and dumped with a YAML dumper, so no value can inject YAML. Every string
we put into a compose file is escaped for compose's own `$` interpolation, so `$HOME` in an `env` entry stays
literal. A repository-owned compose file is judged and run in the form compose itself produces from it
(`docker compose config`: interpolated in a clean environment, normalised), so what the policy accepts is
exactly what runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.common.checkout_paths import remove_tree, write_new
from orchestrator.common.keyed import keyed
from orchestrator.common.naming import CODEHOST, project_slug, repository_identity
from orchestrator.common.naming import deployment_id as make_deployment_id
from orchestrator.plugin_api.preview_config import ConfigError, PreviewConfig
from orchestrator.plugin_api.types import RenderContext
from orchestrator.rendering.build_context import keep_out_of_images
from orchestrator.rendering.compose_document import (
    GENERATED_COMPOSE,
    INJECTED_DOCKERFILE,
    PASSWORD_PLACEHOLDER,
    REPO_COMPOSE_NAMES,
    REPO_COMPOSE_OUTPUT,
    RESOURCES,
    Normalizer,
    PendingStartup,
    RenderedDeployment,
    build_dir,
    dump_compose,
)
from orchestrator.rendering.generated import generated
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.rendering.repository_compose import repository_owned
from orchestrator.rendering.startup import main_process, with_startup

__all__ = ["GENERATED_COMPOSE", "INJECTED_DOCKERFILE", "REPO_COMPOSE_OUTPUT", "RESOURCES", "PendingStartup",
           "RenderedDeployment", "dump_compose", "main_process", "make_context", "render_deployment",
           "rewrite_compose", "with_startup", "write_rendered"]


def make_context(
    owner: str, repo: str, pr_number: int, app_host_port: int, db_host_port: int, password_key: bytes | None,
    image_overrides: dict[str, str] | None = None, build_cache: bool = False, repository: str | None = None,
    secrets_scope: str = "repository",
) -> RenderContext:
    """`password_key` None: the password is shown as a placeholder (`preview-orchestrator render`).
    `build_cache`: templates may use BuildKit cache mounts (BUILD_CACHE_MOUNTS; RenderContext.cache_mount).
    `repository`: the repository's identity (host/owner/name, an event's `repository`); None: a pull request of
    the code host. `secrets_scope`: the record's `secretsScope` — `deployment` for a preview deployed before
    secrets were keyed by repository (its database volume has that password)."""
    slug = project_slug(owner, repo)
    deployment = make_deployment_id(slug, pr_number)
    identity = repository or repository_identity(CODEHOST, owner, repo)
    # Stable across updates (the database volume keeps it), unique per deployment and repository (two
    # repositories' names can give one deployment id, one after the other), not guessable by a PR.
    subject = deployment if secrets_scope == "deployment" else f"{identity}#{deployment}"
    password = (PASSWORD_PLACEHOLDER if password_key is None
                else keyed(password_key, f"{subject}:db").hexdigest()[:24])
    return RenderContext(
        owner=owner, repo=repo, project_slug=slug, pr_number=pr_number, deployment_id=deployment,
        repository=identity,
        app_host_port=app_host_port, db_host_port=db_host_port, db_password=password,
        image_overrides=image_overrides or {},
        secret_key=None if password_key is None else password_key.decode("latin-1"), build_cache=build_cache,
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
        return repository_owned(host, repo_dir, present[0], config, context, normalize)
    return generated(host, repo_dir, config, context)


def write_rendered(repo_dir: Path, rendered: RenderedDeployment) -> Path:
    """Write the planned files into the work directory; returns the compose file to run. Nothing is written
    through a link the repository placed at one of these names (see checkout_paths.write_new)."""
    if rendered.rename:
        source, target = rendered.rename
        os.replace(repo_dir / source, repo_dir / target)
    # The normalized output's name is the service's alone: a checkout's own file (or link) of that name beside a
    # generated compose file would later be taken for what the service ran (cleanup, wake and reset-db read the
    # compose file back, that name first), so it goes. (The generated file's name is also a repository's own
    # compose file's, which the normalized output is made from and which stays.)
    leftover = repo_dir / REPO_COMPOSE_OUTPUT
    if rendered.compose_file == GENERATED_COMPOSE and (leftover.is_symlink() or leftover.is_file()):
        leftover.unlink()
    for name, text in rendered.files.items():
        write_new(repo_dir, name, text)
    keep_out_of_images(repo_dir, [*rendered.files, rendered.compose_file])
    own = build_dir(repo_dir)
    remove_tree(own)  # what an earlier deploy of this work directory wrote
    if rendered.build_files:
        own.mkdir(mode=0o700)  # its keyed cache ids are the repository's: no build user of another may read them
        for name, text in rendered.build_files.items():
            write_new(own, name, text, mode=0o600)
    return repo_dir / rendered.compose_file


def rewrite_compose(repo_dir: Path, rendered: RenderedDeployment) -> Path:
    """Write the compose file again (after `with_startup`), never through a link."""
    return write_new(repo_dir, rendered.compose_file, rendered.compose_text())


