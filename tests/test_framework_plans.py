"""How each built-in framework reads a checkout to choose its build (the part of the default Dockerfiles that
depends on the project), on small checkouts shaped like real ones."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from frameworks.go import main_package
from frameworks.laravel import gives_app_key
from frameworks.nestjs import main_command, node_build
from frameworks.python import dependency_files, installs_itself
from frameworks.rust import Binary, choose_binary
from orchestrator.plugin_api.preview_config import PreviewConfig
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.rendering.compose_file import make_context
from orchestrator.rendering.plugin_host import PluginHost
from tests.support.repos import config_for, make_repo


def project(tmp_path: Path, files: dict[str, str]) -> ProjectFiles:
    return ProjectFiles(make_repo(tmp_path / "r", files=files))


@pytest.mark.uses("nestjs")
@pytest.mark.parametrize(("files", "install", "corepack"), [
    ({"package.json": "{}", "package-lock.json": "{}"}, "npm ci", False),
    ({"package.json": "{}", "npm-shrinkwrap.json": "{}"}, "npm ci", False),
    ({"package.json": "{}", "yarn.lock": ""}, "yarn install --frozen-lockfile", False),
    ({"package.json": "{}", "yarn.lock": "", ".yarnrc.yml": ""}, "yarn install --immutable", True),
    ({"package.json": "{}", "pnpm-lock.yaml": ""}, "pnpm install --frozen-lockfile", True),
    ({"package.json": "{}"}, "npm install", False),
])
def test_the_lockfile_chooses_the_node_package_manager(tmp_path: Path, files: dict, install: str,
                                                       corepack: bool) -> None:
    plan = node_build(project(tmp_path, files))
    assert (plan.install, plan.corepack) == (install, corepack)


@pytest.mark.uses("nestjs")
def test_prisma_and_the_build_script_are_run_when_the_project_has_them(tmp_path: Path) -> None:
    with_both = node_build(project(tmp_path / "a", {
        "package.json": '{"scripts": {"build": "nest build"}, "dependencies": {"@prisma/client": "5"}}',
        "prisma/schema.prisma": "datasource db {}"}))
    assert with_both.prisma and with_both.build
    neither = node_build(project(tmp_path / "b", {"package.json": '{"dependencies": {"@prisma/client": "5"}}'}))
    assert not neither.prisma and not neither.build  # no schema, no build script


@pytest.mark.uses("nestjs")
@pytest.mark.parametrize(("files", "own_stage"), [
    ({"package.json": "{}", "package-lock.json": "{}"}, True),
    ({"package.json": "{}", "pnpm-lock.yaml": ""}, True),
    ({"package.json": "{}", "yarn.lock": ""}, True),
    ({"package.json": "{}", "yarn.lock": "", ".yarnrc.yml": ""}, False),  # Plug'n'Play keeps no node_modules
    ({"package.json": '{"dependencies": {"@prisma/client": "5"}}', "package-lock.json": "{}",
      "prisma/schema.prisma": ""}, False),  # prisma generate writes into node_modules after the source is copied
    ({"package.json": '{"devDependencies": {"prisma": "6"}, "scripts": {"build": "prisma generate && nest build"}}',
      "package-lock.json": "{}", "prisma/schema/base.prisma": ""}, False),  # a schema elsewhere: the same
    ({"package.json": '{"workspaces": ["packages/*"]}', "package-lock.json": "{}"}, False),
    ({"package.json": "{}", "pnpm-lock.yaml": "", "pnpm-workspace.yaml": "packages: ['apps/*']\n"}, False),
])
def test_production_dependencies_get_a_stage_of_their_own_where_nothing_writes_into_them_later(
        host: PluginHost, tmp_path: Path, files: dict[str, str], own_stage: bool) -> None:
    repo = project(tmp_path / "r", files)
    assert node_build(repo).production_stage is own_stage
    text = host.hook.po_dockerfile(framework="nestjs", config=PreviewConfig.model_validate(config_for("nestjs")),
                                   context=make_context("acme", "plan", 1, 8001, 9001, b"k"), project=repo)
    runtime = text.rsplit("\nFROM ", 1)[1]
    assert ("COPY --from=production-dependencies" in runtime) is own_stage
    assert ("COPY --from=build --chown=node:node /app /app" in runtime) is not own_stage

@pytest.mark.uses("nestjs")
@pytest.mark.parametrize(("entrypoint", "command"), [
    ("dist/main", "node dist/main"), ("./dist/main.js", "node ./dist/main.js"), ("server.mjs", "node server.mjs"),
    ("node dist/main.js", "node dist/main.js"), ("npm run start:prod", "npm run start:prod"),
    ("./start.sh", "./start.sh"),
])
def test_a_node_entrypoint_that_is_a_script_runs_with_node(entrypoint: str, command: str) -> None:
    assert main_command(entrypoint) == command


@pytest.mark.uses("python")
@pytest.mark.parametrize(("files", "kind"), [
    ({"pyproject.toml": "", "uv.lock": "", "requirements.txt": ""}, "uv"),
    ({"pyproject.toml": "", "poetry.lock": ""}, "poetry"),
    ({"requirements.txt": "", "pyproject.toml": ""}, "requirements"),
    ({"pyproject.toml": "[project]\nname = 'x'\n"}, "package"),
    ({"setup.py": ""}, "package"),
    ({"app.py": ""}, "none"),
])
def test_python_dependency_files_are_found_in_order(tmp_path: Path, files: dict, kind: str) -> None:
    assert dependency_files(project(tmp_path, files)) == kind


@pytest.mark.uses("python")
def test_a_locked_python_project_that_is_a_package_is_installed_too(tmp_path: Path) -> None:
    assert installs_itself(project(tmp_path / "a", {
        "pyproject.toml": "[project]\nname='x'\n[build-system]\nrequires=['hatchling']\n"}))
    assert not installs_itself(project(tmp_path / "b", {"pyproject.toml": "[project]\nname='x'\n"}))


@pytest.mark.uses("go")
@pytest.mark.parametrize(("files", "package"), [
    ({"go.mod": "module x\n", "main.go": "// a service\npackage main\n"}, "."),
    ({"go.mod": "module example.com/notes\n", "cmd/seed/main.go": "package main", "cmd/server/main.go":
      "package main"}, "./cmd/server"),
    ({"go.mod": "module example.com/notes\n", "cmd/notes/main.go": "package main", "cmd/tool/main.go":
      "package main"}, "./cmd/notes"),  # the module's own name
    ({"go.mod": "module x\n", "cmd/only/main.go": "package main", "internal/lib.go": "package internal"},
     "./cmd/only"),
    ({"go.mod": "module x\n", "lib.go": "package x\n", "lib_test.go": "package main\n"}, "."),
])
def test_the_go_main_package_is_found_where_projects_keep_it(tmp_path: Path, files: dict, package: str) -> None:
    assert main_package(project(tmp_path, files)) == package


@pytest.mark.uses("rust")
@pytest.mark.parametrize(("files", "binary"), [
    ({"Cargo.toml": "[package]\nname = 'api'\n", "src/main.rs": ""}, Binary(None, "api")),
    ({"Cargo.toml": "[package]\nname = 'x'\n[[bin]]\nname = 'server'\npath = 'src/s.rs'\n"}, Binary(None, "server")),
    ({"Cargo.toml": "[package]\nname = 'x'\n", "src/bin/worker.rs": "", "src/bin/api.rs": ""}, Binary(None, "api")),
    ({"Cargo.toml": "[workspace]\nmembers = ['crates/*']\n", "crates/core/Cargo.toml": "[package]\nname='core'\n",
      "crates/web/Cargo.toml": "[package]\nname='web'\n", "crates/web/src/main.rs": ""}, Binary("web", "web")),
    ({"Cargo.toml": "[package]\nname = 'lib'\n", "src/lib.rs": ""}, None),
])
def test_the_rust_binary_comes_from_cargo_toml(tmp_path: Path, files: dict, binary: Binary | None) -> None:
    assert choose_binary(project(tmp_path, files)) == binary


@pytest.mark.uses("laravel")
def test_laravel_gets_an_app_key_of_its_own_unless_the_repository_gives_one(host: PluginHost,
                                                                             tmp_path: Path) -> None:
    config = PreviewConfig.model_validate(config_for("laravel"))
    context = make_context("acme", "shop", 4, 8004, 9004, b"the-service-key")

    def app_key(files: dict, cfg: PreviewConfig = config) -> str | None:
        service = host.hook.po_app_service(framework="laravel", config=cfg, context=context,
                                           project=project(tmp_path / str(len(list(tmp_path.iterdir()))), files))
        return service.service["environment"].get("APP_KEY")

    key = app_key({})
    assert key.startswith("base64:") and len(base64.b64decode(key[7:])) == 32
    assert app_key({}) == key  # stable across updates
    other = make_context("acme", "shop", 5, 8005, 9005, b"the-service-key")
    assert host.hook.po_app_service(framework="laravel", config=config, context=other,
                                    project=project(tmp_path / "o", {})).service["environment"]["APP_KEY"] != key
    assert app_key({".env": "APP_KEY=base64:theirs\n"}) is None
    with_env = PreviewConfig.model_validate(config_for("laravel", env=["APP_KEY=base64:mine"]))
    assert app_key({}, with_env) is None
    assert gives_app_key(PreviewConfig.model_validate(config_for("laravel", env_file=".env.preview")),
                         project(tmp_path / "f", {".env.preview": "APP_KEY=base64:x\n"}))
