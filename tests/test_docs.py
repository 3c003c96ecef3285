"""docs/plugins.md shows each framework's preview-config.yml as it is tested: the blocks are the files of
tests/real_apps (deployed end to end by tests/test_real_apps.py), and the monorepo example renders."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, make_context, render_deployment
from orchestrator.rendering.plugin_host import PluginHost
from tests.support.repos import make_repo

DOCS = Path(__file__).parents[1] / "docs" / "plugins.md"
REAL_APPS = Path(__file__).parent / "real_apps"
SECTION = re.compile(r"^### .*?\(`tests/real_apps/([a-z-]+)`\)\n\n```yaml\n(.*?)```", re.MULTILINE | re.DOTALL)


def test_every_real_app_is_shown_with_its_preview_config_as_written() -> None:
    shown = dict(SECTION.findall(DOCS.read_text()))
    assert set(shown) == {path.name for path in REAL_APPS.iterdir() if path.is_dir()}
    for app, text in shown.items():
        assert text == (REAL_APPS / app / "preview-config.yml").read_text(), app


def test_the_monorepo_example_renders_with_its_own_dockerfile_and_the_repository_as_context(
        host: PluginHost, tmp_path: Path) -> None:
    block = DOCS.read_text().split("### A NestJS monorepo app (`apps/api`)", 1)[1]
    config = yaml.safe_load(block.split("```yaml\n", 1)[1].split("```", 1)[0])
    repo = make_repo(tmp_path / "mono", config, files={
        "nest-cli.json": '{"monorepo": true, "projects": {"api": {"root": "apps/api"}}}',
        "apps/api/Dockerfile": "FROM node:20-bookworm-slim\nCOPY . .\n", "libs/shared/index.ts": ""})
    rendered = render_deployment(host, repo, load_checkout_config(host, repo),
                                 make_context("acme", "mono", 3, 8003, 9003, b"k"))
    assert INJECTED_DOCKERFILE not in rendered.files
    # the build reads the service's copy of the judged apps/api/Dockerfile, beside the checkout
    assert rendered.compose["services"]["app"]["build"] == {"context": ".", "dockerfile": str(repo.parent / "mono.build"
                                                                                          / "app.Dockerfile"),
                                                            "labels": {"dev.preview-orchestrator.deployment":
                                                                       "acme-mono-3"}}
    assert rendered.build_files["app.Dockerfile"] == "FROM node:20-bookworm-slim\nCOPY . .\n"
