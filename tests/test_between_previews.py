"""Previews never reach each other (docs/security.md, "Between previews"): an attacker controls one preview's app;
a victim preview of another repository runs beside it, protected, with a secret page. Through a real nginx with
the service's own routes, each way an upstream could steer nginx into the victim is tried and fails.

The replays, the wake's hand-back, the keys of everything a preview's identity names and the resource bounds
are tried here too, at the layer that enforces them; the Docker side of the bounds is in test_e2e_deploy."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from falcon import testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from orchestrator.adapters.nginx import APP_HEADER_RULE, Proxy, Routing
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import mirror_name, repository_identity
from orchestrator.common.preview_tokens import WOKEN_PREFIX, wake_key
from orchestrator.events.inbox import Inbox
from orchestrator.http.app import create_app
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.rendering.compose_policy import normalized_problems
from orchestrator.state.records import PullRequestEvent
from tests.conftest import SettingsFactory
from tests.support import web
from tests.support.handlers import RecordingHandler
from tests.support.live import wait_until
from tests.support.nginx import Nginx, nginx_where_workers_look, subject_of
from tests.support.payloads import pr_payload, webhook_headers
from tests.support.records import sample_record, track
from tests.support.repos import config_for, make_repo

SECRET_PAGE = "victim's secret page"
VICTIM, ATTACKER = ("acme", "billing", 5), ("mallory", "tools", 7)


class VictimApp(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = SECRET_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def attacker_app(targets: dict[str, str]) -> type[BaseHTTPRequestHandler]:
    """The pull request's app: `GET /{name}` answers with the headers `targets[name]` names (an `X-Accel-*`
    header and its value, `|`-separated), and a body of its own."""

    class AttackerApp(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = b"attacker's own page"
            self.send_response(200)
            name, _, value = targets.get(self.path.strip("/"), "X-Nothing|").partition("|")
            self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return AttackerApp


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


@pytest.fixture
def nginx() -> Iterator[Nginx]:
    with nginx_where_workers_look("po-between-") as server:
        yield server


def routing_for(nginx: Nginx, protection: str) -> Routing:
    state = nginx.routes.parent / "state"
    return Routing(protection=protection, users=SecretStr("reviewer:a long password"), sleep=True,  # type: ignore[arg-type]
                   service="127.0.0.1:9", token_key=state / "token.key", wake_key=state / "wake.key")


def install(proxy: Proxy, who: tuple[str, str, int], port: int) -> tuple[str, str]:
    owner, name, pr = who
    record = sample_record(pr, owner, name)
    proxy.install(record.projectSlug, pr, record.deploymentId, port, None, subject=record.subject)
    return record.projectSlug, record.deploymentId


# (PREVIEW_PROTECTION=token renders the same app locations; its auth_request needs the service: the property test
# below holds every mode to the rule)
@pytest.mark.parametrize("protection", ["none", "basic"])
def test_an_app_cannot_steer_nginx_into_another_preview(nginx: Nginx, protection: str) -> None:
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  public_host=f"127.0.0.1:{nginx.port}", listen_port=nginx.port,
                  routing=routing_for(nginx, protection))
    victim_server, victim_port = serve(VictimApp)
    victim_slug, victim_id = sample_record(VICTIM[2], *VICTIM[:2]).projectSlug, sample_record(
        VICTIM[2], *VICTIM[:2]).deploymentId
    targets = {  # every internal place of the victim's route an answer could name
        "woken": f"X-Accel-Redirect|{WOKEN_PREFIX}{victim_id}/secret",
        "wake": f"X-Accel-Redirect|@preview-wake-{victim_id}",
        "auth": f"X-Accel-Redirect|/.preview-orchestrator/auth/{victim_id}",
        "route": f"X-Accel-Redirect|/{victim_slug}/pr-{VICTIM[2]}/",
        "limit": "X-Accel-Limit-Rate|1",
        "cookie": "Set-Cookie|tossed=1; Domain=preview.test; Path=/",  # for every preview of the domain
    }
    attacker_server, attacker_port = serve(attacker_app(targets))
    try:
        install(proxy, VICTIM, victim_port)
        attacker_slug, attacker_id = install(proxy, (ATTACKER[0], ATTACKER[1], ATTACKER[2]), attacker_port)
        # a reload is applied by nginx's master after the command returns: the attacker's route serving its own
        # page is the sign that the configuration with both routes is in force
        wait_until(lambda: web.get(f"{nginx.url}/{attacker_slug}/pr-{ATTACKER[2]}/", timeout=10,
                                   auth=("reviewer", "a long password") if protection == "basic" else None
                                   ).text == "attacker's own page", timeout=15, message="the routes serve")
        nginx.wait_settled()
        # the victim's route answers only with its protection's credentials (or not at all, when closed)
        if protection != "none":
            assert web.get(f"{nginx.url}/{victim_slug}/pr-{VICTIM[2]}/", timeout=10).status_code == 401
        for name in targets:
            answer = web.get(f"{nginx.url}/{attacker_slug}/pr-{ATTACKER[2]}/{name}", timeout=10,
                             auth=("reviewer", "a long password") if protection == "basic" else None)
            assert SECRET_PAGE not in answer.text, name
            assert answer.status_code == 200 and answer.text == "attacker's own page", (name, answer.text)
            assert "x-accel-redirect" not in answer.headers
            if name == "cookie":  # scoped to the preview's own host, whatever the app said
                assert "Domain=127.0.0.1" in answer.headers["set-cookie"], answer.headers["set-cookie"]
        # the victim's internal locations are never reachable from outside either
        assert web.get(f"{nginx.url}{WOKEN_PREFIX}{victim_id}/secret", timeout=10).status_code == 404
        assert attacker_id != victim_id
    finally:
        victim_server.shutdown()
        attacker_server.shutdown()


def proxying_locations(text: str) -> list[str]:
    """Each `location` block of a route that proxies to an app (not to the service)."""
    blocks, depth, current = [], 0, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("location ") and stripped.endswith("{"):
            current, depth = [line], 1
            continue
        if current is not None:
            current.append(line)
            depth += stripped.count("{") - stripped.count("}")
            if depth == 0:
                blocks.append("\n".join(current))
                current = None
    return [block for block in blocks if "proxy_pass http://" in block and "/api/preview-" not in block]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.sampled_from(["path", "host"]), protection=st.sampled_from(["none", "basic", "token"]),
       sleep=st.booleans(), tls=st.booleans(), slug=st.from_regex(r"[a-z0-9]{1,12}(-[a-z0-9]{1,12}){0,3}",
                                                                    fullmatch=True),
       pr=st.integers(1, 2**31 - 1), port=st.integers(1, 65535), host=st.sampled_from(["127.0.0.1", "10.1.0.12"]))
def test_every_location_that_proxies_to_an_app_ignores_its_accel_headers(
        tmp_path: Path, mode: str, protection: str, sleep: bool, tls: bool, slug: str, pr: int, port: int,
        host: str) -> None:
    cert = tmp_path / "c.pem" if tls else None
    routing = Routing(mode=mode, domain="preview.test", protection=protection,  # type: ignore[arg-type]
                      users=SecretStr("a:b"), sleep=sleep, wake_key=tmp_path / "wake.key", tls_cert=cert,
                      tls_key=cert, token_key=tmp_path / "token.key")
    proxy = Proxy(tmp_path / "routes", "true", "true", HostEnv.for_state_dir(tmp_path), routing=routing)
    text = proxy.route(slug, pr, f"{slug}-{pr}", port, host, guarded=True, subject=subject_of(f"{slug}-{pr}"))
    locations = proxying_locations(text)
    assert locations, text
    assert len(locations) == (2 if sleep else 1)  # the route's own, and the wake's hand-back to the app
    for location in locations:
        assert APP_HEADER_RULE in location, location
    # only the wake location, which asks the service, may honour X-Accel-Redirect
    honouring = [block for block in text.split("location ")[1:] if "proxy_pass" in block
                 and APP_HEADER_RULE not in block]
    assert all("/api/preview-" in block for block in honouring)


# The wake's hand-back ---------------------------------------------------------------------------------------------


def wake_client(make_settings: SettingsFactory, handler: RecordingHandler) -> tuple[testing.TestClient, bytes]:
    settings = make_settings(preview_idle_minutes=30)
    client = testing.TestClient(create_app(settings, handler))
    from orchestrator.common.secret_files import random_key, read_or_create

    return client, read_or_create(settings.preview_wake_key_path, random_key)


def test_a_running_app_s_502_reaches_the_client_as_it_is(make_settings: SettingsFactory, handler: RecordingHandler,
                                                         tmp_path: Path) -> None:
    client, key = wake_client(make_settings, handler)
    woke = datetime.now(UTC) - timedelta(seconds=60)
    track(tmp_path / "state" / "deployments.json", sample_record(3, wokeAt=woke), sample_record(4))
    three = {"X-Preview-Wake-Key": wake_key(key, subject_of("acme-api-3")), "X-Original-URI": "/acme-api/pr-3/x",
             "X-Original-Method": "POST"}
    # came a second after the wake: the app itself dropped it; never handed back (a POST reached it once)
    dropped = client.simulate_get("/api/preview-wake/acme-api-3", headers={**three, "X-Request-Age": "0.001"})
    assert dropped.status_code == 502 and "closed the connection" in dropped.text
    assert "x-accel-redirect" not in dropped.headers and "location" not in dropped.headers
    timed_out = client.simulate_get("/api/preview-wake/acme-api-3",
                                    headers={**three, "X-Request-Age": "0.001", "X-Upstream-Status": "504"})
    assert timed_out.status_code == 504
    # came before the wake finished: it found the preview asleep, and is given to the app (a POST by a 307)
    early = client.simulate_get("/api/preview-wake/acme-api-3", headers={**three, "X-Request-Age": "3600"})
    assert early.status_code == 307 and early.headers["location"] == "/acme-api/pr-3/x"
    got = client.simulate_get("/api/preview-wake/acme-api-3",
                              headers={**three, "X-Original-Method": "GET", "X-Request-Age": "3600"})
    assert got.headers["x-accel-redirect"] == f"{WOKEN_PREFIX}acme-api-3/x"
    # a preview that never slept: every 502 is the app's own
    four = {"X-Preview-Wake-Key": wake_key(key, subject_of("acme-api-4")), "X-Original-URI": "/acme-api/pr-4/",
            "X-Request-Age": "3600"}
    assert client.simulate_get("/api/preview-wake/acme-api-4", headers=four).status_code == 502
    assert handler.entries("start") == []  # nothing was woken


@pytest.mark.parametrize("path", ["/acme-api/pr-3/../../.preview-orchestrator/app/victim-5/s",
                                  "/acme-api/pr-3/%2e%2e/%2E%2E/.preview-orchestrator/app/victim-5/s",
                                  "/acme-api/pr-3/a/..%2f..%2fvictim", "/acme-api/pr-3/./x"])
def test_a_handed_back_path_never_climbs_out_of_its_preview(make_settings: SettingsFactory,
                                                             handler: RecordingHandler, tmp_path: Path,
                                                             path: str) -> None:
    client, key = wake_client(make_settings, handler)
    track(tmp_path / "state" / "deployments.json", sample_record(3, wokeAt=datetime.now(UTC)))
    answer = client.simulate_get("/api/preview-wake/acme-api-3", headers={
        "X-Preview-Wake-Key": wake_key(key, subject_of("acme-api-3")), "X-Original-URI": path,
        "X-Request-Age": "3600"})
    assert answer.headers["x-accel-redirect"] == f"{WOKEN_PREFIX}acme-api-3/"


def test_the_wake_key_of_one_repository_s_route_wakes_no_other_s_preview(
        make_settings: SettingsFactory, handler: RecordingHandler, tmp_path: Path) -> None:
    client, key = wake_client(make_settings, handler)
    # acme/_api holds acme-api-3 now; the route of acme/api's PR 3 (gone) kept its key
    track(tmp_path / "state" / "deployments.json", sample_record(3, "acme", "_api", status="sleeping"))
    old_route = {"X-Preview-Wake-Key": wake_key(key, subject_of("acme-api-3")), "X-Original-URI": "/acme-api/pr-3/"}
    assert client.simulate_get("/api/preview-wake/acme-api-3", headers=old_route).status_code == 403
    assert client.simulate_get("/api/preview-wake/acme-api-9", headers=old_route).status_code == 403  # no record
    assert handler.entries("start") == []


# Identity ---------------------------------------------------------------------------------------------------------


def test_repositories_that_share_a_slug_share_no_mirror_or_cache() -> None:
    web_app, acme_web = repository_identity("github", "acme", "web-app"), repository_identity("github", "acme-web",
                                                                                               "app")
    assert mirror_name("acme-web-app", web_app) != mirror_name("acme-web-app", acme_web)
    assert mirror_name("acme-web-app", web_app) == mirror_name("acme-web-app", "github/acme/web-app")
    assert mirror_name("acme-web-app", web_app).startswith("acme-web-app-")
    assert repository_identity("local", "acme", "api") != repository_identity("github", "acme", "api")
    from orchestrator.rendering.compose_file import make_context

    one = make_context("acme", "web-app", 1, 8001, 9001, b"k", build_cache=True)
    other = make_context("acme-web", "app", 1, 8001, 9001, b"k", build_cache=True)
    local = make_context("acme", "web-app", 1, 8001, 9001, b"k", build_cache=True,
                         repository=repository_identity("local", "acme", "web-app"))
    assert one.deployment_id == other.deployment_id
    caches = {c.cache_mount("go-build", "/root/.cache/go-build") for c in (one, other, local)}
    secrets = {c.derived_secret("session") for c in (one, other, local)}
    assert len(caches) == 3 and len(secrets) == 3


# Replays -------------------------------------------------------------------------------------------------------


def event(action: str, updated: str | None, delivery: str, owner: str = "acme") -> PullRequestEvent:
    return PullRequestEvent(delivery_id=delivery, action=action, deployment_id=f"{owner}-api-3",  # type: ignore[arg-type]
                            project_slug=f"{owner}-api", repo_owner=owner, repo_name="api", pr_number=3,
                            received_at=datetime.now(UTC),
                            pr_updated_at=datetime.fromisoformat(updated) if updated else None)


def test_an_event_older_than_one_accepted_for_its_pull_request_is_stale(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.db")
    assert not inbox.accept(event("opened", "2026-11-26T10:00:00+00:00", "d1")).stale
    assert not inbox.accept(event("synchronize", "2026-11-26T10:05:00+00:00", "d2")).stale
    replayed = inbox.accept(event("synchronize", "2026-11-26T10:00:00+00:00", "d3"))  # the old body, a new id
    assert replayed.stale and not replayed.duplicate
    assert inbox.accept(event("closed", "2026-11-26T10:04:59+00:00", "d4")).stale
    # the newest event again under another id: a replay; another event of the same second: acted on
    assert inbox.accept(event("synchronize", "2026-11-26T10:05:00+00:00", "d5")).stale
    assert not inbox.accept(event("closed", "2026-11-26T10:05:00+00:00", "d5b")).stale
    assert inbox.accept(event("closed", "2026-11-26T11:00:00+01:00", "d6")).stale  # 10:00 UTC: older than 10:05
    assert not inbox.accept(event("closed", "2026-11-26T11:06:00+01:00", "d7")).stale  # 10:06 UTC: newer
    # the clock is kept per repository and pull request: another repository's PR 3 has its own
    assert not inbox.accept(event("opened", "2026-11-26T09:00:00+00:00", "d8", owner="other")).stale
    assert not inbox.accept(event("opened", None, "d9")).stale  # says nothing of when: never stale
    inbox.close()


def test_a_replayed_delivery_does_nothing(make_settings: SettingsFactory, handler: RecordingHandler) -> None:
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), handler))

    def send(action: str, sha: str, updated: str, delivery: str | None = None) -> dict:
        data = json.loads(pr_payload(action, number=3, sha=sha))
        data["pull_request"]["updated_at"] = updated
        body = json.dumps(data).encode()
        answer = client.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body, delivery=delivery))
        assert answer.status_code == 200, answer.text
        return data

    opened = send("opened", "1" * 40, "2026-11-26T10:00:00Z")
    send("synchronize", "2" * 40, "2026-11-26T10:05:00Z")
    send("closed", "2" * 40, "2026-11-26T10:06:00Z")
    send("reopened", "2" * 40, "2026-11-26T10:07:00Z")
    acted = [(e["action"], e["sha"]) for e in handler.entries()]
    # captured bodies sent again under new delivery ids: an old commit's synchronize, a close, the first open
    send("synchronize", "2" * 40, "2026-11-26T10:05:00Z")
    send("closed", "2" * 40, "2026-11-26T10:06:00Z")
    send("reopened", "2" * 40, "2026-11-26T10:07:00Z")  # the newest one, again
    body = json.dumps(opened).encode()
    assert client.simulate_post("/webhook/codehost", body=body,
                                headers={k: v for k, v in webhook_headers(body).items()
                                         if k != "X-GitHub-Delivery"}).status_code == 200  # and without an id
    assert [(e["action"], e["sha"]) for e in handler.entries()] == acted
    assert acted == [("opened", "1" * 40), ("synchronize", "2" * 40), ("closed", "2" * 40), ("reopened", "2" * 40)]


# Resource bounds a repository cannot lift ----------------------------------------------------------------------


@pytest.mark.parametrize(("service", "problem"), [
    ({"pids_limit": -1}, "pids_limit -1 is not allowed"),
    ({"pids_limit": 0}, "pids_limit 0 is not allowed"),
    ({"pids_limit": 100000}, "pids_limit 100000 is not allowed"),
    ({"ulimits": {"rtprio": 99}}, "ulimits rtprio is not allowed"),
    ({"ulimits": {"nice": {"soft": -20, "hard": -20}}}, "ulimits nice is not allowed"),
    ({"ulimits": {"memlock": -1}}, "ulimits memlock is not allowed"),
    ({"ulimits": {"nofile": {"soft": 1024, "hard": 2**31}}}, "ulimits nofile must be between 0 and"),
])
def test_resource_bounds_a_repository_cannot_lift(tmp_path: Path, service: dict, problem: str) -> None:
    document = {"services": {"app": {"image": "x", **service}}}
    problems = normalized_problems(document, tmp_path, "acme-api-3", "compose.preview.yml")
    assert any(problem in p for p in problems), problems
    fine = {"services": {"app": {"image": "x", "pids_limit": 200, "ulimits": {"nofile": {"soft": 1024,
                                                                                          "hard": 65536}}}}}
    assert normalized_problems(fine, tmp_path, "acme-api-3", "compose.preview.yml") == []


# Same origin under path routing -----------------------------------------------------------------------------------


def test_doctor_and_start_up_say_that_path_routing_shares_one_origin(make_settings: SettingsFactory) -> None:
    from orchestrator.cli.doctor import _origins

    shared = _origins(make_settings(preview_protection="token"))
    assert not shared.ok and not shared.hard  # a warning at start-up, not a refusal
    assert "one preview's JavaScript can open the others" in shared.line() and "PREVIEW_ROUTING=host" in shared.line()
    assert _origins(make_settings(preview_protection="basic", preview_protection_users="a:b")).ok is False
    assert _origins(make_settings()).ok  # nothing to steal without protection
    assert _origins(make_settings(preview_routing="host", preview_domain="preview.test",
                                  preview_protection="token")).ok


def test_routes_of_an_older_version_are_renewed_at_start_up(nginx: Nginx) -> None:
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  public_host=f"127.0.0.1:{nginx.port}", listen_port=nginx.port, routing=routing_for(nginx, "none"))
    attacker_server, attacker_port = serve(attacker_app({"x": f"X-Accel-Redirect|{WOKEN_PREFIX}acme-billing-5/"}))
    victim_server, victim_port = serve(VictimApp)
    try:
        install(proxy, VICTIM, victim_port)
        slug, attacker_id = install(proxy, ATTACKER, attacker_port)
        path = proxy.path(slug, ATTACKER[2])
        # as an older version wrote it: no header rule, the wake key of the deployment id alone
        current = path.read_text()
        old_key = wake_key(routing_key(nginx), attacker_id)
        path.write_text(current.replace(f"    {APP_HEADER_RULE}\n", "").replace(
            wake_key(routing_key(nginx), sample_record(ATTACKER[2], *ATTACKER[:2]).subject), old_key))
        proxy.reload(None)
        # the old hole, once nginx's master has applied the reload
        wait_until(lambda: web.get(f"{nginx.url}/{slug}/pr-{ATTACKER[2]}/x", timeout=10).text == SECRET_PAGE,
                   timeout=15, message="the old route serves")
        nginx.wait_settled()
        records = [sample_record(VICTIM[2], *VICTIM[:2]), sample_record(ATTACKER[2], *ATTACKER[:2])]
        renewed = proxy.renew([(r.projectSlug, r.prNumber, r.deploymentId, r.subject, []) for r in records])
        assert renewed == [attacker_id]  # the victim's route was today's already
        assert path.read_text() == current  # today's route, proxying where it did
        # the reload's new workers take over while the old ones finish (under load, a moment after settling)
        wait_until(lambda: web.get(f"{nginx.url}/{slug}/pr-{ATTACKER[2]}/x", timeout=10).text
                   == "attacker's own page", timeout=10, message="the renewed route served")
        assert proxy.renew([(r.projectSlug, r.prNumber, r.deploymentId, r.subject, []) for r in records]) == []
    finally:
        attacker_server.shutdown()
        victim_server.shutdown()


def routing_key(nginx: Nginx) -> bytes:
    from orchestrator.common.secret_files import random_key, read_or_create

    return read_or_create(nginx.routes.parent / "state" / "wake.key", random_key)


# Built images ---------------------------------------------------------------------------------------------------


def test_built_images_have_names_no_other_preview_can_derive() -> None:
    from orchestrator.rendering.compose_file import make_context

    one = make_context("acme", "web-app", 5, 8005, 9005, b"the service's key")
    other = make_context("acme-web", "app", 5, 8005, 9005, b"the service's key")  # same id, another repository
    unkeyed = make_context("acme", "web-app", 5, 8005, 9005, b"a guessed key")
    names = {c.built_image("app") for c in (one, other, unkeyed)}
    assert len(names) == 3 and all(n.startswith("po-build/") and n.endswith("-app") for n in names)
    assert one.built_image("app") == make_context("acme", "web-app", 5, 8105, 9105, b"the service's key").built_image(
        "app")  # stable across updates (other ports)
    assert one.deployment_id not in one.built_image("app")


@pytest.mark.parametrize("service", [
    {"image": "po-build/0123456789abcdef-app", "pull_policy": "never"},
    {"image": "docker.io/PO-BUILD/anything"},
    {"build": {"context": "{repo}", "dockerfile_inline": "FROM po-build/0123-app\nCOPY . ."}},
    {"build": {"context": "{repo}", "args": {"BASE": "po-build/0123-app"}}},
])
def test_a_compose_file_cannot_name_the_built_images(tmp_path: Path, service: dict) -> None:
    text = json.dumps(service).replace("{repo}", str(tmp_path))
    problems = normalized_problems({"services": {"app": json.loads(text)}}, tmp_path, "acme-api-3", "c.yml")
    assert any("po-build/" in p and "built for previews" in p for p in problems), problems


@pytest.mark.parametrize("dockerfile", [
    "FROM po-build/0123456789abcdef-app\n",
    "FROM python:3.12\nCOPY --from=po-build/0123-app /app /stolen\n",
    "FROM python:3.12\nRUN --mount=type=bind,from=po-build/0123-app,target=/s cp -r /s /stolen\n",
    "ARG BASE=po-\\\nbuild/0123-app\nFROM $BASE\n",
    "# escape=`\nFROM po-`\nbuild/0123-app\n",
])
def test_a_dockerfile_cannot_name_the_built_images(tmp_path: Path, dockerfile: str) -> None:
    (tmp_path / "Dockerfile").write_text(dockerfile)
    assert dockerfile_problems(tmp_path / "Dockerfile") == [
        "Dockerfile may not name po-build/ (it holds the images built for previews)"]
    (tmp_path / "Dockerfile").write_text("FROM python:3.12\nCOPY --from=builder /app /app\n")
    assert dockerfile_problems(tmp_path / "Dockerfile") == []


def test_a_repository_s_dockerfile_named_as_the_service_s_own_is_checked_as_any_other(tmp_path: Path) -> None:
    """`dockerfile: Dockerfile.preview-orchestrator` names the repository's own file: the name of the Dockerfile the
    service writes is no pass through the Dockerfile checks."""
    from orchestrator.rendering.checkout_config import load_checkout_config
    from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, make_context, render_deployment
    from orchestrator.rendering.plugin_host import build_plugin_host

    host = build_plugin_host(load_entry_points=False)
    repo = make_repo(tmp_path / "r", {**config_for("go"), "dockerfile": INJECTED_DOCKERFILE})
    context = make_context("acme", "shop", 1, 8001, 9001, b"k")
    for hostile, problem in (("FROM 3f2a9c1d\n", "may not name an image by its id"),
                             ("FROM po-build/abc-app\n", "may not name po-build/")):
        (repo / INJECTED_DOCKERFILE).write_text(hostile)
        with pytest.raises(ConfigError) as refused:
            render_deployment(host, repo, load_checkout_config(host, repo), context)
        assert problem in str(refused.value.problems)
    (repo / INJECTED_DOCKERFILE).write_text("FROM golang:1.22\nRUN --mount=type=cache,target=/c true\n")
    rendered = render_deployment(host, repo, load_checkout_config(host, repo), context)
    assert INJECTED_DOCKERFILE not in rendered.files  # the repository's file, not replaced by the template
    assert "id=po-cache-" in "".join(rendered.build_files.values())  # its cache mount keyed as a repository's


def test_the_build_s_copies_are_readable_by_the_service_alone(tmp_path: Path) -> None:
    """`pr-N.build/` holds the repository's Dockerfile with its cache mounts keyed: a build user of another
    repository (BUILD_COMMANDS_MODE=host) that read the id could name that repository's cache."""
    import stat

    from orchestrator.rendering.checkout_config import load_checkout_config
    from orchestrator.rendering.compose_document import build_dir
    from orchestrator.rendering.compose_file import make_context, render_deployment, write_rendered
    from orchestrator.rendering.plugin_host import build_plugin_host

    host = build_plugin_host(load_entry_points=False)
    repo = make_repo(tmp_path / "r", {**config_for("go"), "dockerfile": "Dockerfile"})
    (repo / "Dockerfile").write_text("FROM golang:1.22\nRUN --mount=type=cache,target=/c true\n")
    rendered = render_deployment(host, repo, load_checkout_config(host, repo), make_context("acme", "shop", 1, 8001,
                                                                                            9001, b"k"))
    write_rendered(repo, rendered)
    own = build_dir(repo)
    copies = list(own.iterdir())
    assert copies and "id=po-cache-" in "".join(path.read_text() for path in copies)
    assert stat.S_IMODE(own.stat().st_mode) & 0o077 == 0
    assert all(stat.S_IMODE(path.stat().st_mode) & 0o077 == 0 for path in copies)


def test_database_passwords_differ_between_repositories_and_old_previews_keep_theirs() -> None:
    import hashlib
    import hmac

    from orchestrator.rendering.compose_file import make_context
    from orchestrator.state.records import DeploymentRecord

    key = b"the service's key"
    one = make_context("acme", "web-app", 5, 8005, 9005, key)
    other = make_context("acme-web", "app", 5, 8005, 9005, key)  # the same deployment id, after the first
    assert one.deployment_id == other.deployment_id and one.db_password != other.db_password
    # a preview deployed before: its volume has the password of the id alone, and keeps it on every update
    older = make_context("acme", "web-app", 5, 8005, 9005, key, secrets_scope="deployment")
    assert older.db_password == hmac.new(key, b"acme-web-app-5:db", hashlib.sha256).hexdigest()[:24]
    stored_before = sample_record(5, "acme", "web-app").model_dump(exclude={"secretsScope"})
    assert DeploymentRecord.model_validate(stored_before).secretsScope == "deployment"


@pytest.mark.parametrize(("files", "problem"), [
    ({"image": "3f2a", "pull_policy": "never"}, "image 3f2a is not allowed (an image id"),
    ({"image": "sha256:3f2a9c1d"}, "image sha256:3f2a9c1d is not allowed (an image id"),
])
def test_an_image_id_cannot_stand_for_another_preview_s_image(tmp_path: Path, files: dict, problem: str) -> None:
    problems = normalized_problems({"services": {"app": files}}, tmp_path, "acme-api-3", "c.yml")
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("dockerfile", [
    "FROM 3f2a\n", "FROM --platform=linux/amd64 sha256:3f2a9c\n",
    "FROM python:3.12\nCOPY --from=3f2a /app /stolen\n",
    "FROM python:3.12\nRUN --mount=type=bind,from=beef,target=/s cp -r /s /x\n",
])
def test_a_dockerfile_cannot_name_an_image_by_its_id(tmp_path: Path, dockerfile: str) -> None:
    (tmp_path / "Dockerfile").write_text(dockerfile)
    [problem] = dockerfile_problems(tmp_path / "Dockerfile")
    assert "may not name an image by its id" in problem
    # stages by name or index are not images, unless the name could be an id (hex digits alone: `beef`)
    (tmp_path / "Dockerfile").write_text("FROM golang:1.22 AS builder\nFROM python:3.12\nCOPY --from=builder /a /a\n"
                                         "COPY --from=0 /b /b\nRUN --mount=type=cache,target=/c true\n")
    assert dockerfile_problems(tmp_path / "Dockerfile") == []


def dockerfile_problems(path: Path) -> list[str]:
    """What the service refuses a repository's Dockerfile at `path` for (none: it would build it)."""
    from orchestrator.rendering.dockerfile_policy import judged_dockerfile

    try:
        judged_dockerfile(path.parent, path, "Dockerfile")
    except ConfigError as exc:
        return exc.problems
    return []


def test_an_inbox_kept_before_the_newest_event_was_remembered_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "inbox.db"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE pull_request_clock (repository TEXT NOT NULL, pr_number INTEGER NOT NULL, "
                "updated_at TEXT NOT NULL, PRIMARY KEY (repository, pr_number))")
    old.commit()
    old.close()
    inbox = Inbox(path)
    assert not inbox.accept(event("opened", "2026-11-26T10:00:00+00:00", "m1")).stale
    assert inbox.accept(event("opened", "2026-11-26T10:00:00+00:00", "m2")).stale
    inbox.close()


@pytest.mark.docker
def test_only_images_the_service_built_are_counted_or_removed_by_their_label(tmp_path: Path) -> None:
    """A pulled image carries whatever labels its publisher chose: one labelled with another preview's id (or a
    name like an unrelated compose project's) must neither be swept at start-up nor removed with that preview."""
    import subprocess

    from orchestrator.common.labels import DEPLOYMENT_LABEL
    from orchestrator.runtime.compose_cli import DockerResources
    from tests.support.standins import require_engine

    require_engine()
    names = {"forged": "po-test-forged/published:1", "built": "po-build/0123abcd-app"}
    ids = {}
    for kind, name in names.items():
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "Dockerfile").write_text(f"FROM po-standin/base:test\nLABEL {DEPLOYMENT_LABEL}=acme-victim-9"
                                                    f" kind={kind}\n")
        subprocess.run(["docker", "build", "-q", "-t", name, str(tmp_path / kind)], check=True, capture_output=True,
                       timeout=300)
        ids[kind] = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", name], check=True,
                                   capture_output=True, text=True).stdout.strip()
    try:
        docker = DockerResources(HostEnv.for_state_dir(tmp_path))
        found = docker.labelled("image")
        assert found.get(ids["built"]) == "acme-victim-9" and ids["forged"] not in found
        assert docker.remove_labelled("acme-victim-9", None) == []
        for kind, gone in (("built", True), ("forged", False)):
            listed = subprocess.run(["docker", "image", "ls", "-q", names[kind]], capture_output=True, text=True,
                                    check=True).stdout.strip()
            assert (listed == "") == gone, kind
    finally:
        subprocess.run(["docker", "image", "rm", "--force", *names.values()], capture_output=True, timeout=60)
