"""The built-in `laravel` framework: composer install, then `php artisan serve` on the app port.

`app_entrypoint` is required by the spec but unused: the container always runs `php artisan serve`.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.hookspecs import hookimpl
from orchestrator.plugin_types import AppService, Detection, FrameworkSpec, RenderContext
from orchestrator.preview_config import PreviewConfig
from orchestrator.templating import render_template

NAME = "laravel"
TOOLCHAIN_IMAGE = "composer:2"  # builds the app; build_commands run in it too


def _serve_command(config: PreviewConfig) -> str:
    return f'exec php artisan serve --host=0.0.0.0 --port="${{{config.app_port_env}}}"'


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8000,
            default_entrypoint="php artisan serve",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Laravel: composer install --no-dev, served by `php artisan serve`",
        )
    ]


@hookimpl(trylast=True)
def po_detect_framework(repo_dir: Path) -> Detection | None:
    composer = repo_dir / "composer.json"
    if not composer.is_file() or composer.stat().st_size > 1024 * 1024:
        return None
    try:
        manifest = json.loads(composer.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    requires = manifest.get("require") if isinstance(manifest, dict) else None
    if isinstance(requires, dict) and "laravel/framework" in requires:
        return Detection(framework=NAME, rank=30, reason="laravel/framework in composer.json")
    return None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext) -> str | None:
    if framework != NAME:
        return None
    return render_template(
        __name__, "Dockerfile.j2",
        composer_image=context.image(TOOLCHAIN_IMAGE),
        runtime_image=context.image("php:8.3-cli"),
        port=config.app_port, serve=_serve_command(config),
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(service={}, command=["/bin/sh", "-c", _serve_command(config)])
