"""The built-in `nestjs` framework: a Node project, built the way its lockfile says.

The lockfile decides the package manager (package-lock.json → `npm ci`, yarn.lock → yarn, pnpm-lock.yaml →
pnpm through corepack, none → `npm install`); `npm run build` runs when package.json has a build script,
`prisma generate` when the project uses Prisma; development dependencies are pruned for the runtime stage,
which runs as the image's `node` user. The pruned dependencies get a stage of their own, keyed by the manifests
alone, so that a change of code reuses them (`NodeBuild.production_stage`).

With npm's lockfile, the `dependencies` stage is labelled with what it installs from (DEPENDENCIES_LABEL), so that
the service keeps a base preview's (BASE_PREVIEWS) for the repository's pull requests: one whose manifests differ
starts from the base preview's `node_modules` and lets `npm install` bring them to its lockfile — it downloads and
unpacks only what changed, where `npm ci` would install everything again (`NodeBuild.from_base`).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, replace

from orchestrator.plugin_api import (
    DEPENDENCIES_LABEL,
    AppService,
    Detection,
    FrameworkSpec,
    PreviewConfig,
    ProjectFiles,
    RenderContext,
    hookimpl,
    render_template,
)

NAME = "nestjs"
TOOLCHAIN_IMAGE = "node:20-bookworm-slim"  # builds the app; build_commands run in it too


@dataclass(frozen=True)
class NodeBuild:
    lockfiles: list[str]
    install: str
    prune: str
    corepack: bool
    prisma: bool
    build: bool
    # Prune in a stage of its own (see `node_build`), or after the build as before
    production_stage: bool = False
    installed: str = ""  # DEPENDENCIES_LABEL's value: what `npm ci` installs from; "": no label (see `installs`)
    from_base: str = ""  # the base preview's dependencies image to install on top of; "": from nothing


def installs(plan: NodeBuild, project: ProjectFiles, build_image: str, context: RenderContext) -> NodeBuild:
    """`plan` with its label (a digest of the build image's name, the install and the lockfile's name, then one of
    the manifests), and the base preview's installed dependencies to start from when the repository has them for the
    same first part and other manifests. Only npm's lockfile with the production stage: `npm install` keeps to a
    lockfile as `npm ci` does (the template checks that it did); the other package managers' incremental installs
    are not checked so."""
    if plan.install != "npm ci" or not plan.production_stage:
        return plan
    names = ["package.json", *plan.lockfiles]
    manifests = [project.read_text(name) for name in names]
    if any(text is None for text in manifests):  # a manifest over ProjectFiles' bound: no label, installed as before
        return plan
    how = hashlib.sha256("\0".join([build_image, plan.install, *names]).encode()).hexdigest()[:16]
    installed = f"{how}-{hashlib.sha256(chr(0).join(map(str, manifests)).encode()).hexdigest()[:32]}"
    base = context.base_dependencies
    if base is None or base.installed == installed or not base.installed.startswith(f"{how}-"):
        return replace(plan, installed=installed)
    return replace(plan, installed=installed, from_base=base.image)


def node_build(project: ProjectFiles) -> NodeBuild:
    manifest = project.read_json("package.json")
    manifest = manifest if isinstance(manifest, dict) else {}
    scripts = manifest.get("scripts") if isinstance(manifest.get("scripts"), dict) else {}
    packages = {name for key in ("dependencies", "devDependencies")
                if isinstance(manifest.get(key), dict) for name in manifest[key]}
    prisma_packages = bool({"prisma", "@prisma/client"} & packages)
    prisma = prisma_packages and project.is_file("prisma/schema.prisma")
    # The pruned dependencies get a stage of their own, keyed by the manifests alone, unless something may write
    # into node_modules after the source is copied (Prisma's client, wherever its schema is), the workspaces'
    # manifests are not beside the root's when it installs, or Yarn 2+ keeps the packages outside node_modules
    # (Plug'n'Play): those prune after the build.
    own_stage = not prisma_packages and "workspaces" not in manifest and not project.is_file("pnpm-workspace.yaml")
    build = "build" in scripts
    if project.is_file("pnpm-lock.yaml"):
        return NodeBuild(["pnpm-lock.yaml"], "pnpm install --frozen-lockfile", "pnpm prune --prod", True, prisma,
                         build, own_stage)
    if project.is_file("yarn.lock"):
        if project.is_file(".yarnrc.yml"):  # Yarn 2+ (berry): through corepack, as its packageManager says
            return NodeBuild(["yarn.lock", ".yarnrc.yml"], "yarn install --immutable",
                             "yarn workspaces focus --all --production", True, prisma, build)
        return NodeBuild(["yarn.lock"], "yarn install --frozen-lockfile",
                         "yarn install --production --frozen-lockfile --ignore-scripts --prefer-offline", False,
                         prisma, build, own_stage)
    for lockfile in ("package-lock.json", "npm-shrinkwrap.json"):
        if project.is_file(lockfile):
            return NodeBuild([lockfile], "npm ci", "npm prune --omit=dev", False, prisma, build, own_stage)
    return NodeBuild([], "npm install", "npm prune --omit=dev", False, prisma, build, own_stage)


def main_command(entrypoint: str) -> str:
    """A build output (`dist/main`, `./dist/main.js`) or a `.js` file is a script for node; anything else
    (`node dist/main.js`, `npm run start:prod`, `./start.sh`) is a command."""
    first = shlex.split(entrypoint)[0] if entrypoint.strip() else ""
    if first.removeprefix("./").startswith("dist/") or first.endswith((".js", ".mjs", ".cjs")):
        return f"node {entrypoint}"
    return entrypoint


@hookimpl(trylast=True)
def po_frameworks() -> list[FrameworkSpec]:
    return [
        FrameworkSpec(
            name=NAME,
            default_port=3000,
            default_entrypoint="dist/main",
            toolchain_image=TOOLCHAIN_IMAGE,
            description="NestJS (or any Node app): the lockfile's package manager, npm run build, prisma generate, "
                        "production dependencies only",
        )
    ]


@hookimpl(trylast=True)
def po_migrations(framework: str) -> list[str] | None:
    # Prisma (`prisma/migrations/`), TypeORM and MikroORM (`migrations/` or `src/migrations/` by convention).
    if framework != NAME:
        return None
    return ["prisma/migrations/**", "migrations/**", "src/migrations/**", "src/**/migrations/**"]


@hookimpl(trylast=True)
def po_detect_framework(project: ProjectFiles) -> Detection | None:
    if project.is_file("nest-cli.json"):
        return Detection(framework=NAME, rank=10, reason="nest-cli.json")
    manifest = project.read_json("package.json")
    dependencies = manifest.get("dependencies") if isinstance(manifest, dict) else None
    if isinstance(dependencies, dict) and "@nestjs/core" in dependencies:
        return Detection(framework=NAME, rank=10, reason="@nestjs/core in package.json")
    return None


@hookimpl(trylast=True)
def po_dockerfile(framework: str, config: PreviewConfig, context: RenderContext,
                  project: ProjectFiles) -> str | None:
    if framework != NAME:
        return None
    image = context.image(TOOLCHAIN_IMAGE)
    return render_template(
        __name__, "Dockerfile.j2", build_image=image, runtime_image=image,
        plan=installs(node_build(project), project, image, context), label=DEPENDENCIES_LABEL,
        port=config.app_port, main=main_command(config.app_entrypoint),
    )


@hookimpl(trylast=True)
def po_app_service(framework: str, config: PreviewConfig, context: RenderContext,
                   project: ProjectFiles) -> AppService | None:
    if framework != NAME:
        return None
    return AppService(
        service={"environment": {"NODE_ENV": "production"}},
        command=["/bin/sh", "-c", f"exec {main_command(config.app_entrypoint)}"],
    )

