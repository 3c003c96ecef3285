"""The built-in `nestjs` framework: a Node project built with `npm ci` and `npm run build`."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.hookspecs import hookimpl
from orchestrator.plugin_types import AppService, Detection, FrameworkSpec, RenderContext
from orchestrator.preview_config import PreviewConfig
from orchestrator.templating import render_template

NAME = "nestjs"
TOOLCHAIN_IMAGE = "node:20-bookworm-slim"  # builds the app; build_commands run in it too


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=3000,
            default_entrypoint="node dist/main.js",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="NestJS (or any Node app): npm ci, npm run build, production dependencies only",
        )
    ]


@hookimpl(trylast=True)
def po_detect_framework(repo_dir: Path) -> Detection | None:
    if (repo_dir / "nest-cli.json").is_file():
        return Detection(framework=NAME, rank=10, reason="nest-cli.json")
    package = repo_dir / "package.json"
    if package.is_file() and package.stat().st_size < 1024 * 1024:
        try:
            manifest = json.loads(package.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        dependencies = manifest.get("dependencies") if isinstance(manifest, dict) else None
        if isinstance(dependencies, dict) and "@nestjs/core" in dependencies:
            return Detection(framework=NAME, rank=10, reason="@nestjs/core in package.json")
    return None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext) -> str | None:
    if framework != NAME:
        return None
    image = context.image(TOOLCHAIN_IMAGE)
    return render_template(
        __name__, "Dockerfile.j2", build_image=image, runtime_image=image,
        port=config.app_port, entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(
        service={"environment": {"NODE_ENV": "production"}},
        command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"],
    )
