"""A third-party distribution (tests/example_plugin) found through its entry point, end to end."""

from __future__ import annotations

from pathlib import Path

import yaml
from falcon import testing

from orchestrator.http.app import create_app
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, make_context, render_deployment, write_rendered
from orchestrator.rendering.plugin_host import build_plugin_host
from tests.support.compose import compose_config
from tests.support.repos import make_repo


def test_entry_point_plugin_is_listed_accepted_and_rendered(settings, handler, tmp_path: Path) -> None:  # noqa: ANN001
    host = build_plugin_host()  # built-ins + entry points, as the service does
    plugins = testing.TestClient(create_app(settings, handler, host)).simulate_get("/api/plugins").json
    deno = next(p for p in plugins["plugins"] if p["name"] == "deno")
    assert deno["builtin"] is False and deno["frameworks"] == ["deno"]
    assert deno["hooks"] == ["po_app_service", "po_detect_framework", "po_dockerfile", "po_frameworks"]
    forge = next(p for p in plugins["plugins"] if p["name"] == "forge")  # a code host of the same distribution
    assert forge["codehosts"] == ["forge"] and forge["hooks"] == ["po_codehost", "po_codehosts"]

    repo = make_repo(tmp_path / "r", files={"deno.json": "{}"})
    assert host.detect_framework(repo).framework == "deno"
    (repo / "preview-config.yml").write_text(yaml.safe_dump({
        "framework": "deno", "database": "postgres", "health_check_path": "/", "app_port": 8000,
        "app_port_env": "PORT", "app_entrypoint": "deno run -A main.ts"}))
    config = load_checkout_config(host, repo)
    rendered = render_deployment(host, repo, config, make_context("a", "b", 3, 8003, 9003, b"k"))
    assert rendered.files[INJECTED_DOCKERFILE].startswith("FROM denoland/deno:2.0.0")
    write_rendered(repo, rendered)
    app = yaml.safe_load(compose_config(repo, rendered.compose_file))["services"]["app"]
    assert app["environment"]["DENO_NO_UPDATE_CHECK"] == "1"


def test_disabling_the_entry_point_by_name() -> None:
    assert "deno" in build_plugin_host().provided.frameworks  # installed: disabling it is what takes it away
    host = build_plugin_host(disabled=["deno"])
    assert "deno" not in host.provided.frameworks
