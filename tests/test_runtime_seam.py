"""The runtime seam: a runtime from a plugin (po_runtimes + po_runtime), chosen by RUNTIME, receives every
build, start, stop and remove of the real flows — with real git and the real renderer, no Docker."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.flows.engine import DeployEngine
from orchestrator.flows.handler import FlowError
from orchestrator.plugin_api import (
    DeploymentLog,
    FlowControl,
    Runtime,
    RuntimeFailure,
    RuntimeSpec,
    hookimpl,
)
from orchestrator.rendering.plugin_host import PluginError, build_plugin_host
from orchestrator.state.records import PullRequestEvent
from tests.conftest import SettingsFactory
from tests.support.engines import engine_for
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.repos import config_for


class RecordingRuntime(Runtime):
    """Answers like a runtime whose app is a local HTTP server; records every call with what it was given."""

    name = "recording"

    def __init__(self, app_port: int) -> None:
        self.calls: list[tuple[str, str]] = []
        self.compose_seen: list[str] = []
        self.fail_build = False
        self.exited: str | None = None
        self.early: list[str] = []
        self.db_password = ""
        self._app_port = app_port

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        raise AssertionError("only a repository-owned compose file is read")

    def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        self.calls.append(("build", deployment_id))
        self.compose_seen.append(compose_file.read_text())
        if self.fail_build:
            raise RuntimeFailure("Docker build failed", "step 3/7: npm ERR! missing script: build")

    def image_command(self, deployment_id: str, compose_file: Path, service: str, image: str,
                      log: DeploymentLog, control: FlowControl) -> tuple[list[str] | None, list[str] | None]:
        self.calls.append(("image_command", deployment_id))
        return None, ["./server"]

    def start_dependencies(self, deployment_id: str, compose_file: Path, log: DeploymentLog,
                           control: FlowControl) -> None:
        self.early.append(deployment_id)  # another thread, beside `build`: kept apart from the ordered calls

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        self.calls.append(("start", deployment_id))

    def stop(self, deployment_id: str, log: DeploymentLog | None) -> None:
        self.calls.append(("stop", deployment_id))

    def remove(self, deployment_id: str, compose_file: Path | None) -> list[str]:
        self.calls.append(("remove", deployment_id))
        return []

    def logs(self, deployment_id: str, compose_file: Path, service: str | None, tail: int) -> str:
        self.calls.append(("logs", deployment_id))
        return f"app-1  | listening with password {self.db_password}\n" if self.db_password else ""

    def problem(self, deployment_id: str) -> str | None:
        self.calls.append(("problem", deployment_id))
        return self.exited

    def owned(self, deployment_id: str | None = None) -> dict[str, str]:
        self.calls.append(("owned", deployment_id or "*"))
        return {"stack:orphan": "acme-gone-9"}

    def app_url(self, deployment_id: str, app_port: int, path: str) -> str:
        self.calls.append(("app_url", deployment_id))
        return f"http://127.0.0.1:{self._app_port}{path}"

    def ports_in_use(self) -> set[int]:
        self.calls.append(("ports_in_use", "*"))
        return set()

    def remove_leftovers(self, owner_marker: str) -> None:
        self.calls.append(("remove_leftovers", "*"))


class RecordingRuntimePlugin:
    """A third party's runtime plugin, as small as one can be."""

    def __init__(self, runtime: RecordingRuntime) -> None:
        self.runtime = runtime
        self.built_with: list[str] = []

    @hookimpl
    def po_runtimes(self) -> list[RuntimeSpec]:
        return [RuntimeSpec(name="recording", description="records calls")]

    @hookimpl
    def po_runtime(self, name: str, settings: Any) -> RecordingRuntime | None:
        if name != "recording":
            return None
        self.built_with.append(settings.runtime)
        return self.runtime


@pytest.fixture(autouse=True)
def no_nginx_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens on PROXY_LISTEN_PORT (1) in these tests: the served check is told so after 0.05 s instead
    of REFUSED_GRACE's 3 s (the check itself is test_routing's, with a real nginx)."""
    monkeypatch.setattr("orchestrator.adapters.nginx.served.REFUSED_GRACE", 0.05)


@pytest.fixture
def app_server() -> Iterator[int]:
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def codehost() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost().start()
    yield fake
    fake.stop()


def event(action: str, repo: PullRequestRepo, sha: str) -> PullRequestEvent:
    return PullRequestEvent(
        delivery_id=f"{action}-{sha[:7]}", action=action, deployment_id="acme-api-3", project_slug="acme-api",
        repo_owner="acme", repo_name="api", pr_number=3, branch=repo.branch, commit_sha=sha,
        clone_url=repo.clone_url, head_repo_full_name="acme/api", received_at=datetime.now(UTC),
    )


def engine_with(runtime: RecordingRuntime, make_settings: SettingsFactory, codehost: FakeCodeHost,
                **values: Any) -> tuple[DeployEngine, RecordingRuntimePlugin]:
    plugin = RecordingRuntimePlugin(runtime)
    values = {"health_check_interval_seconds": 0.2, "proxy_listen_port": 1, **values}
    settings = make_settings(runtime="recording", codehost_api_url=codehost.url, proxy_test_command="true",
                             proxy_reload_command="true", allowed_clone_protocols="file",
                             build_commands_mode="off", **values)
    host = build_plugin_host(load_entry_points=False, extra_plugins=[("recording-runtime", plugin)])
    return engine_for(settings, host), plugin


def test_deploy_update_and_cleanup_go_through_the_runtime_from_the_plugin(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    runtime = RecordingRuntime(app_server)
    engine, plugin = engine_with(runtime, make_settings, codehost)
    assert plugin.built_with == ["recording"]
    assert engine.runtime is runtime
    repo = make_pr_repo(tmp_path / "git", "go", "feature/seam", config_for("go", "postgres"))

    engine.handle(event("opened", repo, repo.sha_a))
    # The app answers the first probe: its containers need no look ("problem"); their output is kept once running.
    assert [name for name, _ in runtime.calls] == ["ports_in_use", "build", "start", "app_url", "logs"]
    assert {dep for name, dep in runtime.calls if name != "ports_in_use"} == {"acme-api-3"}
    assert "acme-api-pr-3-app" in runtime.compose_seen[0]  # the rendered compose file, as written
    assert runtime.early == ["acme-api-3"]  # the database started while the app built
    record = engine.store.read().deployments["acme-api-3"]
    assert record.status == "running" and record.commitSha == repo.sha_a
    assert (tmp_path / "proxy" / "acme-api-pr-3.conf").is_file()
    [ready] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    for stage in ("checkout", "build", "start", "health", "route"):  # where the time went
        assert f"{stage} " in ready.split("<sub>")[1]
    assert 'stage="build"' in engine.metrics.exposition().decode()

    runtime.calls.clear()
    engine.handle(event("synchronize", repo, repo.sha_b))
    # Ports kept: not asked again.
    assert [name for name, _ in runtime.calls] == ["build", "start", "app_url", "logs"]
    assert engine.store.read().deployments["acme-api-3"].commitSha == repo.sha_b

    runtime.calls.clear()
    engine.handle(event("closed", repo, repo.sha_b))
    assert runtime.calls == [("remove", "acme-api-3")]
    assert engine.store.read().deployments == {}
    assert not (tmp_path / "proxy" / "acme-api-pr-3.conf").exists()


def test_a_runtime_failure_fails_the_deploy_with_its_message_and_stops_the_preview(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    runtime = RecordingRuntime(app_server)
    runtime.fail_build = True
    engine, _ = engine_with(runtime, make_settings, codehost)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/seam", config_for("go", "postgres"))
    with pytest.raises(FlowError, match="Docker build failed"):
        engine.handle(event("opened", repo, repo.sha_a))
    assert [name for name, _ in runtime.calls] == ["ports_in_use", "build", "stop"]
    assert engine.store.read().deployments["acme-api-3"].status == "failed"
    [comment] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    assert "Docker build failed" in comment and "missing script: build" in comment


def test_startup_asks_the_runtime_what_it_owns_and_removes_what_has_no_record(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int) -> None:
    runtime = RecordingRuntime(app_server)
    engine, _ = engine_with(runtime, make_settings, codehost)
    engine.startup(set())
    assert runtime.calls == [("remove_leftovers", "*"), ("owned", "*"), ("remove", "acme-gone-9")]


def test_an_unknown_runtime_names_the_ones_there_are(make_settings: SettingsFactory) -> None:
    settings = make_settings(runtime="kubernetes")
    with pytest.raises(PluginError, match=r"RUNTIME 'kubernetes' is not provided by any plugin \(available: "
                                          r"compose, swarm\)"):
        engine_for(settings)


def test_compose_is_the_default_runtime(make_settings: SettingsFactory) -> None:
    engine = engine_for(make_settings())
    assert engine.runtime.name == "compose"


def test_an_app_that_exits_fails_the_deploy_at_once_with_its_error_line_first(
        make_settings: SettingsFactory, codehost: FakeCodeHost, tmp_path: Path) -> None:
    runtime = RecordingRuntime(1)  # nothing answers there: only the watch can end the wait early
    runtime.exited = "app exited with code 1"
    engine, _ = engine_with(runtime, make_settings, codehost, health_check_interval_seconds=5.0)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/seam", config_for("go", "postgres"))
    runtime.db_password = engine.context.password_key() and _db_password(engine)
    started = time.monotonic()
    with pytest.raises(FlowError, match="app exited with code 1"):
        engine.handle(event("opened", repo, repo.sha_a))
    assert time.monotonic() - started < 5  # not the 60-second health window
    assert [name for name, _ in runtime.calls][-4:] == ["problem", "logs", "logs", "stop"]
    [comment] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    assert "**app exited with code 1**" in comment
    log = (tmp_path / "deployments" / "acme-api" / "pr-3.log").read_text()
    assert "container output" in log and "listening with password ***" in log
    assert runtime.db_password not in log


def _db_password(engine: DeployEngine) -> str:
    from orchestrator.rendering import make_context

    return make_context("acme", "api", 3, 1, 1, engine.context.password_key()).db_password


def test_every_built_in_runtime_implements_the_whole_interface(make_settings: SettingsFactory,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    host = build_plugin_host(load_entry_points=False)
    monkeypatch.setenv("SWARM_REGISTRY", "127.0.0.1:5000")
    settings = make_settings()
    for name in sorted(host.provided.runtimes):
        assert host.runtime(name, settings).name == name  # PluginError when a required method is missing


def test_a_runtime_that_misses_a_required_method_is_refused_at_start_up(make_settings: SettingsFactory) -> None:
    """Not at its first deploy: the base's NotImplementedError would otherwise fail a pull request's preview."""

    class Half(Runtime):
        name = "half"

        def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
            pass

    class HalfPlugin:
        @hookimpl
        def po_runtimes(self) -> list[RuntimeSpec]:
            return [RuntimeSpec(name="half")]

        @hookimpl
        def po_runtime(self, name: str, settings: Any) -> Runtime | None:
            return Half() if name == "half" else None

    host = build_plugin_host(load_entry_points=False, extra_plugins=[("half-runtime", HalfPlugin())])
    with pytest.raises(PluginError, match=r"runtime 'half' does not implement read, image_command, start, stop"):
        host.runtime("half", make_settings(runtime="half"))
