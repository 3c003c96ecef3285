"""The built-in `rust` framework: `cargo build --release` of the project's binary, at /app/server.

The binary comes from Cargo.toml: a `[[bin]]` name, or the package's own name when it has src/main.rs; in a
workspace, the member that has one (server, api or app first when several do). A Cargo.lock is honoured
(`--locked`). Never auto-detected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.plugin_api import (
    AppService,
    FrameworkSpec,
    PreviewConfig,
    ProjectFiles,
    RenderContext,
    hookimpl,
    render_template,
)

NAME = "rust"
TOOLCHAIN_IMAGE = "rust:1-bookworm"  # builds the app; build_commands run in it too
RUNTIME_IMAGE = "debian:bookworm-slim"
_PREFERRED = ("server", "api", "app", "web")
# What Cargo allows in a package's or a binary's name, and what the template may put in the Dockerfile: a name with
# a line break would add instructions of the pull request's choosing.
_NAME = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Binary:
    package: str | None  # the workspace member to build (None: the root package)
    name: str


def binaries(project: ProjectFiles, directory: str = ".") -> list[str]:
    manifest = project.read_toml(f"{directory}/Cargo.toml") or {}
    package = manifest.get("package") if isinstance(manifest.get("package"), dict) else {}
    declared = [str(item["name"]) for item in manifest.get("bin") or [] if isinstance(item, dict) and "name" in item]
    if declared:
        return [name for name in declared if _NAME.fullmatch(name)]
    found = [name.removesuffix(".rs").rsplit("/", 1)[-1] for name in project.glob(f"{directory}/src/bin", "*.rs")]
    if package.get("name") and project.is_file(f"{directory}/src/main.rs"):
        found.insert(0, str(package["name"]))
    return [name for name in found if _NAME.fullmatch(name)]


def workspace_members(project: ProjectFiles) -> list[str]:
    workspace = (project.read_toml("Cargo.toml") or {}).get("workspace")
    members: list[str] = []
    for pattern in (workspace or {}).get("members") or []:
        pattern = str(pattern).rstrip("/")
        if pattern.endswith("/*"):
            parent = pattern[:-2]
            members += [f"{parent}/{name}" for name in project.list_dir(parent)
                        if project.is_file(f"{parent}/{name}/Cargo.toml")]
        elif project.is_file(f"{pattern}/Cargo.toml"):
            members.append(pattern)
    return members


def choose_binary(project: ProjectFiles) -> Binary | None:
    candidates = [Binary(None, name) for name in binaries(project)]
    for member in workspace_members(project):
        manifest = project.read_toml(f"{member}/Cargo.toml") or {}
        package = str((manifest.get("package") or {}).get("name", member.rsplit("/", 1)[-1]))
        if _NAME.fullmatch(package):
            candidates += [Binary(package, name) for name in binaries(project, member)]
    if not candidates:
        return None
    return next((c for name in _PREFERRED for c in candidates if c.name == name), candidates[0])


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8080,
            default_entrypoint="/app/server",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Rust: cargo build --release --locked of the binary Cargo.toml names (workspaces too), "
                        "at /app/server",
        )
    ]


@hookimpl(trylast=True)
def po_migrations(framework: str) -> list[str] | None:
    # diesel, sqlx and sea-orm: `migrations/` at the crate's root.
    return ["migrations/**"] if framework == NAME else None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext,
                  project: ProjectFiles) -> str | None:
    if framework != NAME:
        return None
    return render_template(
        __name__, "Dockerfile.j2",
        build_image=context.image(TOOLCHAIN_IMAGE),
        runtime_image=context.image(RUNTIME_IMAGE),
        binary=choose_binary(project), locked=project.is_file("Cargo.lock"),
        port=config.app_port, entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(service={}, command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"])
