"""An example third-party framework plugin: Deno apps, detected by deno.json."""

from __future__ import annotations

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

NAME = "deno"


@hookimpl
def po_frameworks() -> list[FrameworkSpec]:
    return [FrameworkSpec(name=NAME, default_port=8000, default_entrypoint="deno run -A main.ts",
                          description="Deno 2")]


@hookimpl
def po_detect_framework(project: ProjectFiles) -> Detection | None:
    if project.is_file("deno.json"):
        return Detection(framework=NAME, rank=5, reason="deno.json")
    return None


@hookimpl
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext) -> str | None:
    if framework != NAME:
        return None
    return render_template(__name__, "Dockerfile.j2", image=context.image("denoland/deno:2.0.0"),
                           port=config.app_port, entrypoint=config.app_entrypoint)


@hookimpl
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(service={"environment": {"DENO_NO_UPDATE_CHECK": "1"}},
                      command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"])
