"""The built-in `python` framework: requirements.txt installed if present. Never auto-detected."""

from __future__ import annotations

from orchestrator.hookspecs import hookimpl
from orchestrator.plugin_types import AppService, FrameworkSpec, RenderContext
from orchestrator.preview_config import PreviewConfig
from orchestrator.templating import render_template

NAME = "python"
TOOLCHAIN_IMAGE = "python:3.12-slim"  # builds the app; build_commands run in it too


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8000,
            default_entrypoint="python main.py",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Python: pip install -r requirements.txt when present",
        )
    ]


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext) -> str | None:
    if framework != NAME:
        return None
    return render_template(
        __name__, "Dockerfile.j2",
        runtime_image=context.image(TOOLCHAIN_IMAGE),
        port=config.app_port, entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(
        service={"environment": {"PYTHONUNBUFFERED": "1"}},
        command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"],
    )
