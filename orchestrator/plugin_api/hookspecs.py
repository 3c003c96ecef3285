"""Every hook of Preview Orchestrator, in one place. Read this and one built-in plugin to write your own.

A plugin is a module (or object) with functions decorated `@hookimpl`, named exactly as below. Third parties
publish it under the entry-point group `preview_orchestrator`:

    [project.entry-points.preview_orchestrator]
    deno = "po_deno.plugin"

Conventions:
- Hooks are called with keyword arguments only; arguments may be added later, never renamed or removed, so a
  plugin may accept just the arguments it needs.
- Hooks are pure: they return data (strings and dicts) and do no I/O. `po_detect_framework` and the rendering
  hooks get `project`, a read-only, bounded view of the checkout, to look at its files.
- Single-answer hooks (`firstresult`) stop at the first non-None answer. Built-in plugins answer with
  `trylast=True`, so a third-party plugin that answers for the same name overrides the built-in.
- A rendering hook is called for every name; answer only for a name your plugin provides, else return None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pluggy

from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import CodeHost, CodeHostSpec
from orchestrator.plugin_api.preview_config import PreviewConfig
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.plugin_api.runtime import Runtime, RuntimeSpec
from orchestrator.plugin_api.types import (
    AppService,
    DatabaseSpec,
    DatabaseWiring,
    Detection,
    FrameworkSpec,
    RenderContext,
    ServiceSpec,
    ServiceWiring,
)

PROJECT = "preview_orchestrator"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# Discovery: what a plugin provides ------------------------------------------------------------


@hookspec
def po_frameworks() -> list[FrameworkSpec]:
    """Frameworks this plugin can build. Called once when the plugin manager is built.

    Each name becomes a valid `framework` in preview-config.yml. Return an empty list (or do not implement
    the hook) if the plugin provides none.
    """


@hookspec
def po_databases() -> list[DatabaseSpec]:
    """Databases this plugin can run as the `db` service. Names become valid `database` values."""


@hookspec
def po_services() -> list[ServiceSpec]:
    """Extra services (redis, ...) this plugin can add. Names become valid `extra_services` entries."""


@hookspec
def po_codehosts() -> list[CodeHostSpec]:
    """Code hosts this plugin serves: where pull requests come from (built in: `github`, `gitea` for Gitea and
    Forgejo, `gitlab`: orchestrator/codehosts/). A name becomes the webhook path `/webhook/{name}` and the prefix of its
    ALLOWED_REPOS entries (`{name}:owner/repo`)."""


@hookspec
def po_runtimes() -> list[RuntimeSpec]:
    """Runtimes this plugin provides: where previews are built and run. Names become valid RUNTIME values
    (`compose`, this host's Docker engine, is built in: orchestrator/runtime/compose.py)."""


# Detection --------------------------------------------------------------------------------------


@hookspec
def po_detect_framework(repo_dir: Path, project: ProjectFiles) -> Detection | None:
    """Say whether the checkout looks like one of your frameworks.

    Every plugin is asked; the answer with the lowest `rank` wins (built-ins: nestjs 10, go 20, laravel 30;
    rust and python are never detected). None: not recognised. When nobody recognises the checkout, the
    host assumes `nestjs`, as the spec says. Read the checkout through `project` (a link out of it reads as
    absent, large files too); `repo_dir` is its path, kept for plugins written before `project` was passed.
    """


@hookspec(firstresult=True)
def po_migrations(framework: str) -> list[str] | None:
    """Where your framework keeps database migrations, as glob patterns of repository paths (`*` within a
    directory, `**` across directories: `database/migrations/*.php`). A pull request that changes files there is
    told so in its comment, with the count (a reviewer then knows the preview's database was migrated from the
    seed). None: not your framework; an empty list: it has no migrations.
    """


# Rendering --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext,
                  project: ProjectFiles) -> str | None:
    """The default Dockerfile text for `framework`, injected when the repository has none.

    None: not your framework. Use `context.image(name)` for every base image (IMAGE_OVERRIDES), run the
    app as a non-root user that can write where the framework needs to, and use `config.app_entrypoint` in
    CMD. `project` is a read-only view of the checkout (lockfiles, manifests) to choose how to build.
    A stage named DEPENDENCIES_STAGE that carries `LABEL {DEPENDENCIES_LABEL}=<what it installs from>` is kept
    after a base preview's build; a pull request's `context.base_dependencies` then names it, for the template to
    start from when its own label differs (frameworks/nestjs shows how, and how it checks the result).
    The text is judged as a repository's Dockerfile is (docs/security.md): no image id or po-build/ name but
    `context.base_dependencies`, RUN flags only `--mount=` and `--network=default|none`, cache mounts only
    `context.cache_mount`'s. A value taken from `project` (a binary's or a directory's name) goes into the text as
    it is: allow only the characters its ecosystem allows (frameworks/rust and frameworks/go do).
    """


@hookspec(firstresult=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> AppService | None:
    """The compose `app` service for `framework` before the host adds what every app gets.

    The host then sets the container name, the published port, the environment (port variable, database
    and service wiring, `env`, `env_file`), `startup_commands`, limits, labels and `depends_on`. Return
    `command` as the main process so startup commands can run before it. None: not your framework.
    A secret the app needs (a session key) comes from `context.derived_secret(purpose)`: stable per
    deployment, never shared between pull requests.
    """


@hookspec(firstresult=True)
def po_database(database: str, context: RenderContext) -> DatabaseWiring | None:
    """The `db` service for `database`, its named volumes, and the variables the app gets.

    The service must have a healthcheck (the app waits for it) and create the database
    `context.database_name`. `app_env` must include DATABASE_URL of the shape
    `<scheme>://<user>:<password>@db:<port>/pr_<N>`. None: not your database. Optional `seed`
    (types.DatabaseSeed): how a new preview's volume can start as a copy of a data directory initialised once
    per image, instead of initialising itself (databases/postgres.py; docs/plugins.md).
    """


@hookspec(firstresult=True)
def po_extra_service(service: str, context: RenderContext) -> ServiceWiring | None:
    """Compose services, named volumes and app variables for one `extra_services` entry.

    The main service should be named after the entry (redis → `redis`). None: not your service.
    """


# Running ------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def po_runtime(name: str, settings: Any) -> Runtime | None:
    """Build the runtime called `name` (the RUNTIME setting) for the service's `settings` (orchestrator.settings.
    Settings; read your own settings from the environment). Called once at start-up; the object implements
    plugin_api.runtime.Runtime. None: not your runtime.
    """


# Pull requests --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def po_codehost(name: str, settings: Any, metrics: Metrics) -> CodeHost | None:
    """Build the code host called `name` for the service's `settings` (read your own settings from the
    environment), counting its API calls in `metrics` (plugin_api.codehost.ApiClient does). Called once at
    start-up; the object subclasses plugin_api.codehost.CodeHost. None: not your host, or it is off (a host is
    on when its webhook secret is set).
    """
