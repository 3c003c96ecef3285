"""The built-in `rust` framework: `cargo build --release`, binaries copied to /app. Never auto-detected."""

from __future__ import annotations

from orchestrator.hookspecs import hookimpl
from orchestrator.plugin_types import AppService, FrameworkSpec, RenderContext
from orchestrator.preview_config import PreviewConfig
from orchestrator.templating import render_template

NAME = "rust"
TOOLCHAIN_IMAGE = "rust:1-bookworm"  # builds the app; build_commands run in it too


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8080,
            default_entrypoint="/app/server",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Rust: cargo build --release; every release binary is copied to /app",
        )
    ]


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext) -> str | None:
    if framework != NAME:
        return None
    return render_template(
        __name__, "Dockerfile.j2",
        build_image=context.image(TOOLCHAIN_IMAGE),
        runtime_image=context.image("debian:bookworm-slim"),
        port=config.app_port, entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(service={}, command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"])
