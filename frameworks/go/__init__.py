"""The built-in `go` framework: a module with go.mod, built to one static binary in a small runtime stage.

This file is the model for a framework plugin: describe what you provide, recognise a checkout, render a
Dockerfile from the template beside you (looking at the checkout through `project`), and describe the app
service.

The main package is found where Go projects keep it: the module root, else `./cmd/<name>` (server, api, app or
the module's own name first when there are several). `vendor/` is used when present (`-mod=vendor`, no
download), CGO is off, and the binary lands at /app/server.
"""

from __future__ import annotations

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

NAME = "go"
TOOLCHAIN_IMAGE = "golang:1.22-bookworm"  # builds the app; build_commands run in it too
RUNTIME_IMAGE = "debian:bookworm-slim"
_PACKAGE_MAIN = re.compile(r"^package\s+main\b", re.MULTILINE)
_PREFERRED = ("server", "api", "app", "web")
_COMMAND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a ./cmd/<name> the template may name


def is_main_package(project: ProjectFiles, directory: str) -> bool:
    return any(_PACKAGE_MAIN.search(project.read_text(name) or "")
               for name in project.glob(directory, "*.go") if not name.endswith("_test.go"))


def main_package(project: ProjectFiles) -> str:
    """`.` or `./cmd/<name>`: where `package main` is."""
    if is_main_package(project, "."):
        return "."
    # a directory's name goes into the Dockerfile: one with a line break or a space would be more than a path
    commands = [name for name in project.list_dir("cmd")
                if _COMMAND.fullmatch(name) and is_main_package(project, f"cmd/{name}")]
    if not commands:
        return "."  # `go build` then says what is missing
    module = re.search(r"^module\s+(\S+)", project.read_text("go.mod") or "", re.MULTILINE)
    preferred = [*_PREFERRED, module[1].rsplit("/", 1)[-1] if module else ""]
    chosen = next((name for name in preferred if name in commands), commands[0])
    return f"./cmd/{chosen}"


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=8080,
            default_entrypoint="/app/server",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="Go module (go.mod): the main package at the root or in ./cmd/<name>, vendor/ when "
                        "present, a static binary at /app/server",
        )
    ]


@hookimpl(trylast=True)
def po_migrations(framework: str) -> list[str] | None:
    # golang-migrate, goose and atlas: a `migrations/` directory by convention.
    return ["migrations/**", "db/migrations/**", "internal/**/migrations/**"] if framework == NAME else None


@hookimpl(trylast=True)
def po_detect_framework(project: ProjectFiles) -> Detection | None:
    if project.is_file("go.mod"):
        return Detection(framework=NAME, rank=20, reason="go.mod")
    return None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext,
                  project: ProjectFiles) -> str | None:
    if framework != NAME:
        return None
    return render_template(
        __name__,
        "Dockerfile.j2",
        build_image=context.image(TOOLCHAIN_IMAGE),
        runtime_image=context.image(RUNTIME_IMAGE),
        main_package=main_package(project),
        vendored=project.is_file("vendor/modules.txt"),
        # Go's build cache across builds of this repository: a push recompiles only the packages it changed.
        # The compiler runs no code of the repository (CGO off, no go:generate). Modules stay in an image
        # layer (go mod download, keyed by go.mod/go.sum): a cache mount pruned by BuildKit's collector then
        # costs time, never a build that needs the network.
        go_build_cache=context.cache_mount("go-build", "/root/.cache/go-build"),
        port=config.app_port,
        entrypoint=config.app_entrypoint,
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(service={}, command=["/bin/sh", "-c", f"exec {config.app_entrypoint}"])
