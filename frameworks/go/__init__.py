"""The built-in `go` framework: a module with go.mod, built to one static binary.

This file is the model for a framework plugin: describe what you provide, recognise a checkout, render a
Dockerfile from the template beside you, and describe the app service.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.hookspecs import hookimpl
from orchestrator.plugin_types import AppService, Detection, FrameworkSpec, RenderContext
from orchestrator.preview_config import PreviewConfig
from orchestrator.templating import render_template

NAME = "go"
TOOLCHAIN_IMAGE = "golang:1.22-bookworm"  # builds the app; build_commands run in it too


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8080,
            default_entrypoint="/app/server",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Go module (go.mod), built with `go build` into /app/server",
        )
    ]


@hookimpl(trylast=True)
def po_detect_framework(repo_dir: Path) -> Detection | None:
    if (repo_dir / "go.mod").is_file():
        return Detection(framework=NAME, rank=20, reason="go.mod")
    return None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext) -> str | None:
    if framework != NAME:
        return None
    return render_template(
        __name__,
        "Dockerfile.j2",
        build_image=context.image(TOOLCHAIN_IMAGE),
        runtime_image=context.image("debian:bookworm-slim"),
        port=config.app_port,
        entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(service={}, command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"])
