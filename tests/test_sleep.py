"""Previews that sleep (PREVIEW_IDLE_MINUTES, docs/routing.md): the setting, the idle decision, the activity file,
the sleep and wake flows through a runtime plugin, and the wake path through a real nginx and the real service
(its wake endpoint, inbox and dispatcher) — without Docker. End to end with Docker: tests/test_sleep_e2e.py."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from orchestrator.adapters.nginx import Proxy
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.preview_tokens import wake_key
from orchestrator.flows.handler import FlowError
from orchestrator.flows.sleep import is_idle, last_request
from orchestrator.http.app import create_app
from orchestrator.settings import Settings, SettingsError, load_settings
from orchestrator.state.records import DeploymentRecord, PortAllocation, PullRequestEvent, StoreFile
from orchestrator.state.store import DeploymentStore
from tests import test_protection, test_runtime_seam
from tests.conftest import SettingsFactory
from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import make_pr_repo
from tests.support.live import free_port, wait_until
from tests.support.nginx import Nginx
from tests.support.repos import config_for
from tests.test_protection import PASSWORD
from tests.test_runtime_seam import RecordingRuntime, engine_with, event

# Fixtures shared with those tests: the runtime seam's local app and fake code host, a directory nginx's workers reach.
app_server, codehost, open_dir = test_runtime_seam.app_server, test_runtime_seam.codehost, test_protection.open_dir

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def settings_of(**values: object) -> Settings:
    return load_settings(_env_file=None, codehost_webhook_secret="s" * 20, **values)


# The setting ----------------------------------------------------------------------------------------------------


def test_previews_never_sleep_by_default_and_the_idle_time_is_validated() -> None:
    assert settings_of().preview_idle_minutes == 0 and settings_of().idle_seconds == 0  # the spec's behaviour
    assert settings_of(preview_idle_minutes="30").idle_seconds == 1800
    assert settings_of(preview_idle_minutes="30", preview_idle_seconds="2.5").idle_seconds == 2.5  # tests' knob
    assert settings_of(sleep_check_interval_seconds="0.5").sleep_check_interval_seconds == 0.5
    for values, message in [
        ({"preview_idle_minutes": "-1"}, "PREVIEW_IDLE_MINUTES is not valid: Input should be greater than or equal"),
        ({"preview_idle_minutes": "10081"}, "PREVIEW_IDLE_MINUTES is not valid: Input should be less than or equal"),
        ({"preview_idle_minutes": "1.5"}, "PREVIEW_IDLE_MINUTES is not valid: Input should be a valid integer"),
        ({"preview_idle_minutes": "soon"}, "PREVIEW_IDLE_MINUTES is not valid: Input should be a valid integer"),
        ({"preview_idle_seconds": "0"}, "PREVIEW_IDLE_SECONDS is not valid: Input should be greater than 0"),
        ({"sleep_check_interval_seconds": "0"}, "SLEEP_CHECK_INTERVAL_SECONDS is not valid"),
        ({"sleep_check_interval_seconds": "7200"}, "SLEEP_CHECK_INTERVAL_SECONDS is not valid"),
    ]:
        with pytest.raises(SettingsError) as refused:
            settings_of(**values)
        assert any(line.startswith(message) for line in refused.value.lines), refused.value.lines


# The idle decision ------------------------------------------------------------------------------------------------


def record(status: str = "running", updated: datetime = NOW - timedelta(hours=2), **extra: Any) -> DeploymentRecord:
    return DeploymentRecord(**{
        "prNumber": 3, "repoName": "api", "repoOwner": "acme", "projectSlug": "acme-api",
        "deploymentId": "acme-api-3", "branch": "main", "commitSha": "a" * 40, "framework": "go", "dbType": "postgres",
        "appPort": 8080, "exposedAppPort": 8003, "exposedDbPort": 9003, "status": status, "createdAt": updated,
        "updatedAt": updated, "url": "http://x/acme-api/pr-3/", **extra})


def test_a_preview_is_idle_after_the_idle_time_without_a_request_or_a_deploy() -> None:
    idle = 30 * 60.0
    long_ago = (NOW - timedelta(minutes=31)).timestamp()
    just_now = (NOW - timedelta(minutes=29)).timestamp()
    assert is_idle(record(), long_ago, NOW, idle)
    assert not is_idle(record(), just_now, NOW, idle)  # a request 29 minutes ago
    assert is_idle(record(), (NOW - timedelta(minutes=30)).timestamp(), NOW, idle)  # exactly the idle time
    # a deploy (or push) counts as use: its time when it is the later one
    assert not is_idle(record(updated=NOW - timedelta(minutes=5)), long_ago, NOW, idle)
    assert last_request(record(updated=NOW - timedelta(minutes=5)), long_ago) == NOW - timedelta(minutes=5)
    assert last_request(record(), just_now) == datetime.fromtimestamp(just_now, UTC)
    assert not is_idle(record(), long_ago, NOW, 0)  # PREVIEW_IDLE_MINUTES=0: never
    assert not is_idle(record(), None, NOW, idle)  # a route written before sleep was on: no activity file
    for status in ("building", "failed", "sleeping"):
        assert not is_idle(record(status), long_ago, NOW, idle)


# The activity file ----------------------------------------------------------------------------------------------


def test_the_activity_file_keeps_the_last_request_s_time_and_is_emptied(tmp_path: Path) -> None:
    proxy = Proxy(tmp_path, "true", "true", HostEnv.for_state_dir(tmp_path))
    assert proxy.last_activity("acme-api", 3) is None  # no route with sleep: no file
    path = proxy.activity_path("acme-api", 3)
    assert path == tmp_path / "activity" / "acme-api-pr-3.log"
    proxy._create_activity("acme-api", 3)  # noqa: SLF001 - what install does for a route with sleep
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    then = time.time() - 3600
    with path.open("a") as nginx_log:
        nginx_log.write('127.0.0.1 - - [..] "GET /acme-api/pr-3/?preview_token=secret HTTP/1.1" 200 2 "-" "-"\n')
    os.utime(path, (then, then))
    assert proxy.last_activity("acme-api", 3) == pytest.approx(then)
    assert path.read_text() == ""  # emptied (no token is kept), its time unchanged
    assert path.stat().st_mtime == pytest.approx(then)
    assert proxy.last_activity("acme-api", 3) == pytest.approx(then)
    proxy.mark_activity("acme-api", 3)  # woken: now
    assert proxy.last_activity("acme-api", 3) == pytest.approx(time.time(), abs=5)
    proxy.remove("acme-api", 3, None)
    assert not path.exists()


# The flows, through a runtime plugin ----------------------------------------------------------------------------


class SleepyRuntime(RecordingRuntime):
    """A runtime that can wake (the optional `wake`): its app is the test's local HTTP server."""

    def __init__(self, app_port: int) -> None:
        super().__init__(app_port)
        self.fail_wake = False

    def wake(self, deployment_id: str, compose_file: Path, log: Any, control: FlowControl) -> None:
        self.calls.append(("wake", deployment_id))
        assert compose_file.is_file()


def age_activity(engine: Any, minutes: float) -> None:
    path = engine.proxy.activity_path("acme-api", 3)
    then = time.time() - minutes * 60
    os.utime(path, (then, then))


def test_an_idle_preview_sleeps_and_a_wake_brings_it_back(make_settings: SettingsFactory, codehost: FakeCodeHost,
                                                        app_server: int, tmp_path: Path) -> None:
    runtime = SleepyRuntime(app_server)
    engine, _ = engine_with(runtime, make_settings, codehost, preview_idle_minutes=30)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/sleep", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    route = (tmp_path / "proxy" / "acme-api-pr-3.conf").read_text()
    activity = tmp_path / "proxy" / "activity" / "acme-api-pr-3.log"
    assert f"access_log {activity} combined if=$upstream_addr;" in route and activity.is_file()
    assert "error_page 502 504 = @preview-wake-acme-api-3;" in route
    assert "location /.preview-orchestrator/app/acme-api-3/ {" in route

    now = datetime.now(UTC)
    assert engine.idle(now) == []  # just deployed
    # the deploy is the last use until a request is later; make both older than the idle time
    engine.store.update(lambda data: data.deployments.update({"acme-api-3": data.deployments["acme-api-3"].model_copy(
        update={"updatedAt": now - timedelta(minutes=40)})}))
    age_activity(engine, 10)
    assert engine.idle(now) == []  # a request 10 minutes ago
    age_activity(engine, 31)
    [(idle, last_use)] = engine.idle(now)
    assert idle.deploymentId == "acme-api-3" and now - last_use > timedelta(minutes=30)

    runtime.calls.clear()
    engine.handle(event_of(idle, "sleep"))
    assert runtime.calls == [("stop", "acme-api-3")]
    slept = engine.store.read().deployments["acme-api-3"]
    assert slept.status == "sleeping" and slept.sleptAt is not None
    assert slept.updatedAt == idle.updatedAt  # the TTL's clock does not move
    assert (tmp_path / "proxy" / "acme-api-pr-3.conf").read_text() == route  # route kept
    [comment] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    assert "Preview sleeping — opens on the next visit" in comment and "http://localhost/acme-api/pr-3/" in comment
    assert engine.idle(now) == []  # asleep: nothing more to do
    assert [r.deploymentId for r in engine.expired(now + timedelta(days=8))] == ["acme-api-3"]  # TTL still applies
    assert 'preview_orchestrator_sleeps_total{result="success"} 1.0' in engine.metrics.exposition().decode()

    runtime.calls.clear()
    engine.handle(event_of(slept, "wake"))
    assert [name for name, _ in runtime.calls] == ["wake", "app_url"]
    awake = engine.store.read().deployments["acme-api-3"]
    assert awake.status == "running" and awake.sleptAt is None and awake.updatedAt == idle.updatedAt
    assert time.time() - activity.stat().st_mtime < 60  # the wake counts as use
    [comment] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    assert "Preview ready" in comment and "woken up in" in comment
    runtime.calls.clear()
    engine.handle(event_of(slept, "wake"))  # a second wake of the same sleep (queued twice): nothing to do
    assert runtime.calls == []
    assert 'preview_orchestrator_wakes_total{result="success"} 1.0' in engine.metrics.exposition().decode()

    # a request came after the sleep was queued: the sleep does nothing
    engine.handle(event_of(awake, "sleep"))
    assert runtime.calls == [] and engine.store.read().deployments["acme-api-3"].status == "running"

    # a push to a sleeping preview deploys it as usual, without touching its (unchanged) route
    engine.store.update(lambda data: data.deployments.update({"acme-api-3": data.deployments["acme-api-3"].model_copy(
        update={"status": "sleeping", "sleptAt": now})}))
    runtime.calls.clear()
    engine.handle(event("synchronize", repo, repo.sha_b))
    pushed = engine.store.read().deployments["acme-api-3"]
    assert pushed.status == "running" and pushed.commitSha == repo.sha_b and pushed.sleptAt is None
    assert [name for name, _ in runtime.calls] == ["build", "start", "app_url", "logs"]

    # close of a sleeping preview: everything goes, the activity file too
    engine.store.update(lambda data: data.deployments.update({"acme-api-3": data.deployments["acme-api-3"].model_copy(
        update={"status": "sleeping", "sleptAt": now})}))
    engine.handle(event("closed", repo, repo.sha_b))
    assert engine.store.read().deployments == {}
    assert not (tmp_path / "proxy" / "acme-api-pr-3.conf").exists() and not activity.exists()


def event_of(record: DeploymentRecord, action: str) -> PullRequestEvent:
    from orchestrator.state.records import event_for_record

    return event_for_record(record, action, f"{action}-{time.monotonic_ns()}")  # type: ignore[arg-type]


def test_a_wake_that_fails_its_health_check_fails_the_preview(make_settings: SettingsFactory,
                                                                codehost: FakeCodeHost, app_server: int,
                                                                tmp_path: Path) -> None:
    runtime = SleepyRuntime(app_server)
    engine, _ = engine_with(runtime, make_settings, codehost, preview_idle_minutes=30,
                            health_check_timeout_seconds=0.5)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/sleep", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    engine.store.update(lambda data: data.deployments.update({"acme-api-3": data.deployments["acme-api-3"].model_copy(
        update={"status": "sleeping", "sleptAt": datetime.now(UTC)})}))
    runtime._app_port = free_port()  # noqa: SLF001 - the app does not come back
    runtime.calls.clear()
    with pytest.raises(FlowError, match="Wake failed: Health check timeout"):
        engine.handle(event_of(engine.store.read().deployments["acme-api-3"], "wake"))
    failed = engine.store.read().deployments["acme-api-3"]
    assert failed.status == "failed" and failed.error == "Wake failed: Health check timeout"
    assert runtime.calls[0] == ("wake", "acme-api-3") and ("stop", "acme-api-3") in runtime.calls
    [comment] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    assert "Preview failed" in comment and "Wake failed: Health check timeout" in comment


def test_previews_of_a_runtime_that_cannot_wake_never_sleep(make_settings: SettingsFactory, codehost: FakeCodeHost,
                                                            app_server: int, tmp_path: Path) -> None:
    engine, _ = engine_with(RecordingRuntime(app_server), make_settings, codehost, preview_idle_minutes=1)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/sleep", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    route = (tmp_path / "proxy" / "acme-api-pr-3.conf").read_text()
    assert "@preview-wake" not in route and "access_log" not in route
    assert engine.idle(datetime.now(UTC) + timedelta(days=1)) == []


# The wake path through a real nginx and the real service, without Docker ---------------------------------------


class WakingHandler:
    """The deploy engine's stand-in: a wake starts the preview's app (a local HTTP server) after a pause, so that
    requests meet the wake running; it counts the wakes."""

    def __init__(self, store: DeploymentStore, app_port: int) -> None:
        self.store = store
        self.app_port = app_port
        self.wakes = 0
        self.app: ThreadingHTTPServer | None = None

    def handle(self, event: PullRequestEvent, control: FlowControl) -> None:
        if event.action != "wake":
            return
        self.wakes += 1
        time.sleep(0.4)
        self.app = ThreadingHTTPServer(("127.0.0.1", self.app_port), EchoApp)
        threading.Thread(target=self.app.serve_forever, daemon=True).start()
        self.store.update(lambda data: data.deployments.update({event.deployment_id: data.deployments[
            event.deployment_id].model_copy(update={"status": "running", "sleptAt": None,
                                           "wokeAt": datetime.now(UTC)})}))

    def stop_app(self) -> None:
        if self.app is not None:
            self.app.shutdown()
            self.app.server_close()
            self.app = None


class EchoApp(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = f"app: {self.command} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815


class Service:
    """The real ASGI app under uvicorn in a thread."""

    def __init__(self, settings: Settings, handler: WakingHandler) -> None:
        config = uvicorn.Config(create_app(settings, handler), host="127.0.0.1", port=settings.orchestrator_port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Service:
        self.thread.start()
        wait_until(lambda: self.server.started, timeout=20, message="service started")
        return self

    def __exit__(self, *args: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)


@pytest.fixture
def wake_setup(open_dir: Path) -> Iterator[tuple[Nginx, SettingsFactory]]:
    nginx = Nginx(open_dir / "nginx", open_dir / "routes").start()

    def settings(**values: Any) -> Settings:
        return load_settings(
            _env_file=None, codehost_webhook_secret="s" * 20, deployments_db=open_dir / "state" / "deployments.json",
            deployments_dir=open_dir / "deployments", proxy_config_dir=nginx.routes,
            proxy_test_command=nginx.test_command, proxy_reload_command=nginx.reload_command,
            proxy_listen_port=nginx.port, preview_base_url=nginx.url, orchestrator_port=free_port(),
            preview_idle_minutes=30, **values)

    yield nginx, settings
    nginx.stop()


def sleeping_preview(settings: Settings, nginx: Nginx, app_port: int) -> tuple[DeploymentStore, Proxy]:
    store = DeploymentStore(settings.deployments_db)
    proxy = Proxy.for_settings(settings, HostEnv.for_state_dir(settings.state_dir), sleep=True)
    asleep = record("sleeping", exposedAppPort=app_port, sleptAt=datetime.now(UTC))

    def put(data: StoreFile) -> None:
        data.deployments["acme-api-3"] = asleep
        data.portAllocations["acme-api-3"] = PortAllocation(exposedAppPort=app_port, exposedDbPort=9003)

    store.update(put)
    proxy.install("acme-api", 3, "acme-api-3", app_port, None, subject=asleep.subject)
    nginx.wait_loaded(proxy.path("acme-api", 3))
    return store, proxy


def test_concurrent_requests_to_a_sleeping_preview_share_one_wake_and_get_the_app_s_answer(
        wake_setup: tuple[Nginx, SettingsFactory]) -> None:
    nginx, make = wake_setup
    settings = make()
    app_port = free_port()
    store, proxy = sleeping_preview(settings, nginx, app_port)
    handler = WakingHandler(store, app_port)
    url = f"{nginx.url}/acme-api/pr-3/items/a%20b?x=1&y=2"
    try:
        with Service(settings, handler), ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: web.get(url, timeout=30), range(8)))
            for answer in answers:  # every request: the app's answer, with the prefix removed, never an error
                assert answer.status_code == 200, answer.text
                assert answer.text == "app: GET /items/a%20b?x=1&y=2"
                assert answer.headers["x-preview-deployment"] == "acme-api-3"
            assert handler.wakes == 1  # one wake for all of them
            assert store.read().deployments["acme-api-3"].status == "running"
            # the activity file saw them (the service empties it when it looks)
            assert time.time() - proxy.last_activity("acme-api", 3) < 30

            # asleep again: a POST wakes it too, then is repeated by the client (307 to the same address)
            handler.stop_app()
            store.update(lambda data: data.deployments.update({"acme-api-3": data.deployments["acme-api-3"]
                                                               .model_copy(update={"status": "sleeping",
                                                                                   "sleptAt": datetime.now(UTC)})}))
            posted = web.post(url, content=b"form", timeout=30)
            assert posted.status_code == 307 and posted.headers["location"] == "/acme-api/pr-3/items/a%20b?x=1&y=2"
            assert web.post(url, content=b"form", timeout=30).text == "app: POST /items/a%20b?x=1&y=2"
            assert handler.wakes == 2

            # the wake endpoint answers nginx's wake location only: no key, no wake
            service = f"http://127.0.0.1:{settings.orchestrator_port}/api/preview-wake/acme-api-3"
            assert web.get(service, timeout=10).status_code == 403
            assert web.get(service, headers={"X-Preview-Wake-Key": wake_key(b"guess", record().subject)},
                           timeout=10).status_code == 403
            # a client cannot reach the route's internal location of the app
            assert web.get(f"{nginx.url}/.preview-orchestrator/app/acme-api-3/", timeout=10).status_code == 404
    finally:
        handler.stop_app()


class DroppingApp(BaseHTTPRequestHandler):
    """A running app that closes the connection of every POST without an answer (and counts them)."""

    posts = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        type(self).posts += 1
        self.close_connection = True
        self.connection.shutdown(2)

    def do_GET(self) -> None:  # noqa: N802
        EchoApp.do_GET(self)  # type: ignore[arg-type]


def test_a_running_app_that_drops_a_request_gets_it_once_and_the_client_its_502(
        wake_setup: tuple[Nginx, SettingsFactory]) -> None:
    """nginx's 502 for a running app goes to the wake location too: the service must not hand the request back
    (it did: a POST the app dropped reached it again and again)."""
    nginx, make = wake_setup
    settings = make()
    app = ThreadingHTTPServer(("127.0.0.1", 0), DroppingApp)
    threading.Thread(target=app.serve_forever, daemon=True).start()
    app_port = app.server_address[1]
    store = DeploymentStore(settings.deployments_db)
    proxy = Proxy.for_settings(settings, HostEnv.for_state_dir(settings.state_dir), sleep=True)
    running = record("running", exposedAppPort=app_port)
    store.update(lambda data: data.deployments.update({"acme-api-3": running}))
    proxy.install("acme-api", 3, "acme-api-3", app_port, None, subject=running.subject)
    nginx.wait_loaded(proxy.path("acme-api", 3))
    handler = WakingHandler(store, free_port())
    try:
        with Service(settings, handler):
            url = f"{nginx.url}/acme-api/pr-3/form"
            assert web.get(url, timeout=30).text == "app: GET /form"  # the app runs
            dropped = web.post(url, content=b"order=1", timeout=30)
            assert dropped.status_code == 502 and "closed the connection" in dropped.text
            assert DroppingApp.posts == 1 and handler.wakes == 0
            # once it slept and woke, a request that came after the wake is the app's own failure too
            store.update(lambda data: data.deployments.update({"acme-api-3": running.model_copy(
                update={"wokeAt": datetime.now(UTC) - timedelta(seconds=30)})}))
            assert web.post(url, content=b"order=2", timeout=30).status_code == 502
            assert DroppingApp.posts == 2 and handler.wakes == 0
    finally:
        app.shutdown()
        app.server_close()


def test_a_browser_gets_a_waking_up_page_while_the_wake_takes_long(wake_setup: tuple[Nginx, SettingsFactory]) -> None:
    nginx, make = wake_setup
    settings = make()
    app_port = free_port()
    store, _ = sleeping_preview(settings, nginx, app_port)

    class SlowHandler(WakingHandler):
        def handle(self, event: PullRequestEvent, control: FlowControl) -> None:
            time.sleep(2.5)  # longer than a browser waits
            super().handle(event, control)

    handler = SlowHandler(store, app_port)
    url = f"{nginx.url}/acme-api/pr-3/"
    try:
        with Service(settings, handler):
            started = time.monotonic()
            page = web.get(url, headers={"Accept": "text/html,application/xhtml+xml"}, timeout=30)
            assert time.monotonic() - started < 2.5
            assert page.status_code == 503 and "The preview is waking up" in page.text
            assert '<meta http-equiv="refresh" content="1">' in page.text and page.headers["retry-after"] == "1"
            assert page.headers["x-preview-deployment"] == "acme-api-3"
            wait_until(lambda: store.read().deployments["acme-api-3"].status == "running", timeout=10,
                       message="awake")
            again = web.get(url, headers={"Accept": "text/html"}, timeout=30)  # the page's reload
            assert again.status_code == 200 and again.text == "app: GET /"
            assert handler.wakes == 1
    finally:
        handler.stop_app()


def test_a_preview_on_its_own_host_wakes_with_the_request_s_own_path(open_dir: Path) -> None:
    nginx = Nginx(open_dir / "nginx", open_dir / "routes", all_addresses=True).start()
    settings = load_settings(
        _env_file=None, codehost_webhook_secret="s" * 20, deployments_db=open_dir / "state" / "deployments.json",
        deployments_dir=open_dir / "deployments", proxy_config_dir=nginx.routes, proxy_test_command=nginx.test_command,
        proxy_reload_command=nginx.reload_command, proxy_listen_port=nginx.port, orchestrator_port=free_port(),
        preview_routing="host", preview_domain="preview.test", preview_idle_minutes=30)
    app_port = free_port()
    store, proxy = sleeping_preview(settings, nginx, app_port)
    assert proxy.path("acme-api", 3) == nginx.routes / "servers" / "acme-api-pr-3.conf"
    handler = WakingHandler(store, app_port)
    try:
        with Service(settings, handler):
            answer = web.get(f"{nginx.url}/items/a?x=1", headers={"Host": "acme-api-pr-3.preview.test"},
                             timeout=30)
            assert answer.status_code == 200 and answer.text == "app: GET /items/a?x=1"
            assert answer.headers["x-preview-deployment"] == "acme-api-3" and handler.wakes == 1
    finally:
        handler.stop_app()
        nginx.stop()


@pytest.mark.parametrize("protection", ["basic", "token"])
def test_protection_asks_for_credentials_before_a_request_can_wake_a_preview(
        wake_setup: tuple[Nginx, SettingsFactory], protection: str) -> None:
    nginx, make = wake_setup
    if protection == "basic":
        settings = make(preview_protection="basic", preview_protection_users=f"alice:{PASSWORD}")
    else:
        settings = make(preview_protection="token")
    app_port = free_port()
    store, proxy = sleeping_preview(settings, nginx, app_port)
    handler = WakingHandler(store, app_port)
    url = f"{nginx.url}/acme-api/pr-3/"
    try:
        with Service(settings, handler), web.Client(timeout=30) as reviewer:
            before = time.time()
            refused = web.get(url, timeout=30)
            assert refused.status_code == 401 and refused.headers["x-preview-deployment"] == "acme-api-3"
            wrong = ({"auth": ("alice", "wrong")} if protection == "basic"
                     else {"cookies": {"preview_access": "1.forged"}})
            assert web.get(url, timeout=30, **wrong).status_code == 401  # type: ignore[arg-type]
            time.sleep(0.5)
            assert handler.wakes == 0 and store.read().deployments["acme-api-3"].status == "sleeping"
            assert proxy.last_activity("acme-api", 3) < before  # turned away: no activity either
            if protection == "basic":
                page = reviewer.get(url, auth=("alice", PASSWORD))
            else:  # the comment's link sets the cookie, then the page
                page = reviewer.get(proxy.reviewer_link(url, record().subject), follow_redirects=True)
            assert page.status_code == 200 and page.text == "app: GET /"
            assert handler.wakes == 1
    finally:
        handler.stop_app()
