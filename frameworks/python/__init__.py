"""The built-in `python` framework: dependencies from the project's own files, the app as a command.

Dependency files, first found wins: uv.lock (installed as `uv export` pins), poetry.lock (`poetry install
--only main`), requirements.txt, pyproject.toml or setup.py (`pip install .`). `app_entrypoint` is a command
(`uvicorn app.main:app --host 0.0.0.0 --port $PORT`, `gunicorn …`, `python manage.py runserver …`) run by a
shell, so `$PORT` and the app_port_env variable expand. Never auto-detected.
"""

from __future__ import annotations

from orchestrator.plugin_api import (
    AppService,
    FrameworkSpec,
    PreviewConfig,
    ProjectFiles,
    RenderContext,
    hookimpl,
    render_template,
)

NAME = "python"
TOOLCHAIN_IMAGE = "python:3.12-slim"  # builds the app; build_commands run in it too


def dependency_files(project: ProjectFiles) -> str:
    """Which way the project declares its dependencies: uv, poetry, requirements, package or none."""
    if project.is_file("pyproject.toml") and project.is_file("uv.lock"):
        return "uv"
    if project.is_file("pyproject.toml") and project.is_file("poetry.lock"):
        return "poetry"
    if project.is_file("requirements.txt"):
        return "requirements"
    if project.is_file("pyproject.toml") or project.is_file("setup.py"):
        return "package"
    return "none"


def installs_itself(project: ProjectFiles) -> bool:
    """A pyproject.toml that builds a package (uv and poetry lock only its dependencies)."""
    pyproject = project.read_toml("pyproject.toml") or {}
    return "build-system" in pyproject and (project.is_dir("src") or "project" in pyproject)


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8000,
            default_entrypoint="python main.py",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Python: uv.lock, poetry.lock, requirements.txt or pyproject.toml; the app as a command",
        )
    ]


@hookimpl(trylast=True)
def po_migrations(framework: str) -> list[str] | None:
    # Django (`<app>/migrations/0001_*.py`) and Alembic (`alembic/versions/`, Flask-Migrate's `migrations/versions/`).
    return ["**/migrations/[0-9]*.py", "alembic/versions/**", "migrations/versions/**"] if framework == NAME else None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext,
                  project: ProjectFiles) -> str | None:
    if framework != NAME:
        return None
    kind = dependency_files(project)
    return render_template(
        __name__, "Dockerfile.j2",
        runtime_image=context.image(TOOLCHAIN_IMAGE), kind=kind,
        install_project=kind in ("uv", "poetry") and installs_itself(project),
        port=config.app_port, entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(
        service={"environment": {"PYTHONUNBUFFERED": "1"}},
        command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"],
    )
