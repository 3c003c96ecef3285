"""The built-in `laravel` framework: `composer install --no-dev --optimize-autoloader`, the PHP extension of
the preview's database, `storage/` and `bootstrap/cache` writable by the runtime user (www-data), served by
`php artisan serve` on the app port.

Every deployment gets an APP_KEY of its own when the repository gives none (derived from the service's key:
stable across updates, like the database password). `app_entrypoint` is required by the spec but unused.
"""

from __future__ import annotations

import base64
import re

from orchestrator.plugin_api import (
    AppService,
    Detection,
    FrameworkSpec,
    PreviewConfig,
    ProjectFiles,
    RenderContext,
    hookimpl,
    render_template,
)

NAME = "laravel"
TOOLCHAIN_IMAGE = "composer:2"  # builds the app; build_commands run in it too
RUNTIME_IMAGE = "php:8.3-cli"
# The PHP extension each built-in database needs, and the system package it is built against.
EXTENSIONS = {"postgres": ("pdo_pgsql", "libpq-dev"), "mysql": ("pdo_mysql", "")}
_APP_KEY = re.compile(r"^\s*APP_KEY\s*=\s*\S", re.MULTILINE)


def _serve_command(config: PreviewConfig) -> str:
    return f'exec php artisan serve --host=0.0.0.0 --port="${{{config.app_port_env}}}"'


def gives_app_key(config: PreviewConfig, project: ProjectFiles) -> bool:
    """The repository sets APP_KEY itself: in preview-config.yml's env, its env_file, or a committed .env."""
    if config.env_map.get("APP_KEY"):
        return True
    return any(_APP_KEY.search(project.read_text(name) or "") for name in filter(None, (config.env_file, ".env")))


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8000,
            default_entrypoint="php artisan serve",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Laravel: composer install --no-dev --optimize-autoloader, an APP_KEY per deployment, "
                        "served by `php artisan serve`",
        )
    ]


@hookimpl(trylast=True)
def po_migrations(framework: str) -> list[str] | None:
    # Laravel's `php artisan make:migration` writes them here.
    return ["database/migrations/**"] if framework == NAME else None


@hookimpl(trylast=True)
def po_detect_framework(project: ProjectFiles) -> Detection | None:
    manifest = project.read_json("composer.json")
    requires = manifest.get("require") if isinstance(manifest, dict) else None
    if isinstance(requires, dict) and "laravel/framework" in requires:
        return Detection(framework=NAME, rank=30, reason="laravel/framework in composer.json")
    return None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext,
                  project: ProjectFiles) -> str | None:
    if framework != NAME:
        return None
    extension, library = EXTENSIONS.get(config.database, ("", ""))
    return render_template(
        __name__, "Dockerfile.j2",
        composer_image=context.image(TOOLCHAIN_IMAGE),
        runtime_image=context.image(RUNTIME_IMAGE),
        extension=extension, library=library,
        port=config.app_port, serve=_serve_command(config),
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> AppService | None:
    if framework != NAME:
        return None
    environment = {"LOG_CHANNEL": "stderr"}  # the app's log goes where `docker logs` reads it
    if not gives_app_key(config, project):
        environment["APP_KEY"] = "base64:" + base64.b64encode(context.derived_secret("laravel-app-key")).decode()
    return AppService(service={"environment": environment}, command=["/bin/sh", "-c", _serve_command(config)])
