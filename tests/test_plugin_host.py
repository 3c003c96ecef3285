"""The plugin manager: built-ins, entry points, blocking, overrides and conflicts, detection, the listing."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from falcon import testing

from orchestrator.http.app import create_app
from orchestrator.plugin_api.hookspecs import hookimpl
from orchestrator.plugin_api.types import AppService, Detection, FrameworkSpec
from orchestrator.rendering.compose_file import make_context, render_deployment
from orchestrator.rendering.plugin_host import DEFAULT_PLUGINS, PluginError, build_plugin_host
from tests.support.repos import config_for, make_repo


def framework_plugin(name: str, marker: str = "third-party") -> types.SimpleNamespace:
    @hookimpl
    def po_frameworks() -> list[FrameworkSpec]:
        return [FrameworkSpec(name=name, default_port=9999, default_entrypoint="./run")]

    @hookimpl
    def po_dockerfile(framework, config, context):  # noqa: ANN001, ANN202
        return f"FROM {marker}\n" if framework == name else None

    @hookimpl
    def po_app_service(framework, config, context):  # noqa: ANN001, ANN202
        return AppService(service={}, command=["./run"]) if framework == name else None

    return types.SimpleNamespace(po_frameworks=po_frameworks, po_dockerfile=po_dockerfile,
                                 po_app_service=po_app_service)


def test_builtins_provide_the_spec_names(host) -> None:  # noqa: ANN001
    assert set(host.provided.frameworks) == {"nestjs", "go", "laravel", "rust", "python"}
    assert set(host.provided.databases) == {"postgres", "mysql", "mongodb"}
    assert {"redis", "memcached", "rabbitmq", "mailpit", "minio"} <= set(host.provided.services)
    ports = {name: spec.default_port for name, spec in host.provided.frameworks.items()}
    assert ports == {"nestjs": 3000, "go": 8080, "laravel": 8000, "rust": 8080, "python": 8000}
    assert {n: s.port for n, s in host.provided.databases.items()} == {
        "postgres": 5432, "mysql": 3306, "mongodb": 27017}


def test_listing_describes_each_plugin(host) -> None:  # noqa: ANN001
    listing = {entry["name"]: entry for entry in host.describe()}
    assert set(listing) == set(DEFAULT_PLUGINS)
    go = listing["frameworks.go"]
    assert go == {
        "name": "frameworks.go", "distribution": "preview-orchestrator", "version": "0.1.0", "builtin": True,
        "hooks": ["po_app_service", "po_detect_framework", "po_dockerfile", "po_frameworks", "po_migrations"],
        "frameworks": ["go"], "databases": [], "services": [], "runtimes": [], "codehosts": [],
    }
    assert listing["plugins.redis"]["services"] == ["redis"]
    assert listing["orchestrator.runtime.compose"]["runtimes"] == ["compose"]
    assert listing["orchestrator.codehosts.gitea"]["codehosts"] == ["gitea"]


def test_disabled_plugins_are_not_loaded(tmp_path: Path) -> None:
    host = build_plugin_host(disabled=["frameworks.go", " plugins.redis "], load_entry_points=False)
    assert "go" not in host.provided.frameworks and "redis" not in host.provided.services
    assert "frameworks.go" not in {entry["name"] for entry in host.describe()}
    repo = make_repo(tmp_path / "r", config_for("go"))
    with pytest.raises(Exception, match="framework is not valid"):
        from orchestrator.rendering.checkout_config import load_checkout_config

        load_checkout_config(host, repo)


def test_a_third_party_plugin_overrides_a_builtin(tmp_path: Path) -> None:
    host = build_plugin_host(load_entry_points=False, extra_plugins=[("acme-go", framework_plugin("go"))])
    repo = make_repo(tmp_path / "r", config_for("go"))
    from orchestrator.rendering.checkout_config import load_checkout_config

    config = load_checkout_config(host, repo)
    rendered = render_deployment(host, repo, config, make_context("a", "b", 1, 8001, 9001, b"k"))
    assert rendered.files["Dockerfile.preview-orchestrator"] == "FROM third-party\n"
    assert host.provided.frameworks["go"].default_port == 9999


def test_the_same_name_from_two_third_parties_is_an_error_naming_both() -> None:
    with pytest.raises(PluginError, match="framework 'deno' is provided by both 'one' and 'two'"):
        build_plugin_host(load_entry_points=False, extra_plugins=[
            ("one", framework_plugin("deno")), ("two", framework_plugin("deno"))])


def test_a_misspelled_hook_fails_loudly() -> None:
    @hookimpl
    def po_framewrks() -> list[FrameworkSpec]:
        return []

    with pytest.raises(PluginError, match="unknown hook"):
        build_plugin_host(load_entry_points=False,
                          extra_plugins=[("typo", types.SimpleNamespace(po_framewrks=po_framewrks))])


def test_a_plugin_can_add_a_framework_that_becomes_valid(tmp_path: Path) -> None:
    host = build_plugin_host(load_entry_points=False, extra_plugins=[("acme-zig", framework_plugin("zig"))])
    repo = make_repo(tmp_path / "r", config_for("zig", app_entrypoint="./run"))
    from orchestrator.rendering.checkout_config import load_checkout_config

    assert load_checkout_config(host, repo).framework == "zig"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({}, "nestjs"),
        ({"go.mod": "module x\n"}, "go"),
        ({"composer.json": '{"require": {"laravel/framework": "^11"}}'}, "laravel"),
        ({"composer.json": '{"require": {"symfony/console": "^7"}}'}, "nestjs"),
        ({"nest-cli.json": "{}", "go.mod": "module x\n"}, "nestjs"),
        ({"package.json": '{"dependencies": {"@nestjs/core": "^10"}}', "go.mod": "m"}, "nestjs"),
        ({"go.mod": "module x\n", "composer.json": '{"require": {"laravel/framework": "^11"}}'}, "go"),
        ({"Cargo.toml": "[package]\n", "requirements.txt": "flask\n"}, "nestjs"),
        ({"package.json": "{not json"}, "nestjs"),
    ],
)
def test_po_detect_framework_follows_the_spec_order(host, tmp_path: Path, files: dict, expected: str) -> None:  # noqa: ANN001
    assert host.detect_framework(make_repo(tmp_path / "r", files=files)).framework == expected


def test_detection_reads_the_checkout_through_project_files(host, tmp_path: Path) -> None:  # noqa: ANN001
    """A link out of the checkout reads as absent: a pull request cannot have detection read the host's files."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "go.mod").write_text("module x\n")
    (outside / "composer.json").write_text('{"require": {"laravel/framework": "^11"}}')
    repo = make_repo(tmp_path / "r")
    (repo / "go.mod").symlink_to(outside / "go.mod")
    (repo / "composer.json").symlink_to(outside / "composer.json")
    assert host.detect_framework(repo).framework == "nestjs"  # neither go nor laravel: the default


def test_a_listing_hook_implemented_under_another_name_counts() -> None:
    """`specname=`: pluggy calls it po_frameworks, and so does the host's listing (it asks pluggy, not the module)."""
    @hookimpl(specname="po_frameworks")
    def frameworks_of_mine() -> list[FrameworkSpec]:
        return [FrameworkSpec(name="elixir", default_port=4000, default_entrypoint="mix phx.server")]

    host = build_plugin_host(load_entry_points=False,
                             extra_plugins=[("mine", types.SimpleNamespace(frameworks_of_mine=frameworks_of_mine))])
    assert "elixir" in host.provided.frameworks
    assert [p["frameworks"] for p in host.describe() if p["name"] == "mine"] == [["elixir"]]


def test_detection_by_a_third_party_rank() -> None:
    """A plugin written before `project` was passed (it takes `repo_dir` only) still answers."""
    @hookimpl
    def po_detect_framework(repo_dir: Path) -> Detection:
        return Detection(framework="go", rank=1)

    host = build_plugin_host(load_entry_points=False,
                             extra_plugins=[("eager", types.SimpleNamespace(po_detect_framework=po_detect_framework))])
    assert host.detect_framework(Path("/nonexistent")).framework == "go"


def test_api_plugins_lists_the_same(settings, handler, host) -> None:  # noqa: ANN001
    client = testing.TestClient(create_app(settings, handler, host))
    body = client.simulate_get("/api/plugins").json
    assert body == {"plugins": host.describe()}
