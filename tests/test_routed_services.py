"""Several routed services in one preview (docs/routing.md, "Several routed services"): a repository compose file
marks services besides `app` with `x-preview: {route, port, health_check_path}`; each gets a host port of the
app pool, a route of its own in path and host mode with the app's protection, flag and wake, a health check, and
its URLs in every service's environment. The example examples/web-and-api is deployed as written (its base image
replaced by the stand-in, as IMAGE_OVERRIDES does for the built-in templates)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import httpx
import pytest
from falcon import testing
from selenium.webdriver.common.by import By

from orchestrator.adapters.nginx import Proxy, Routing
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import DNS_LABEL_MAX, preview_host_label, route_host_label
from orchestrator.common.preview_tokens import ROUTE_WOKEN_PREFIX, WOKEN_PREFIX, wake_key
from orchestrator.common.secret_files import random_key, read_or_create
from orchestrator.flows import comments
from orchestrator.flows.handler import FlowError
from orchestrator.http.app import create_app
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import make_context, render_deployment
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.rendering.routed_services import MAX_ROUTES, apply_routes, declared_routes
from orchestrator.runtime.compose_cli import Compose
from orchestrator.state.ports import APP_POOL, allocate, routed_ports
from orchestrator.state.records import PortAllocation, PreviewRoute
from tests.conftest import SettingsFactory
from tests.support import web
from tests.support.browser import chromium, wait_for_fetched
from tests.support.engines import engine_for
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.handlers import RecordingHandler
from tests.support.nginx import Nginx, nginx_where_workers_look, subject_of
from tests.support.records import sample_record, track
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.support.standins import STANDIN_OVERRIDES
from tests.test_routing import loopback_client
from tests.test_runtime_seam import RecordingRuntime, engine_with, event
from tests.test_sleep_e2e import IDLE, wait_asleep

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "web-and-api"
DOMAIN = "preview.test"


def compose_with(api: dict[str, Any] | None = None, **services: dict[str, Any]) -> dict[str, Any]:
    return {"services": {"app": {"build": "."}, **({"api": {"build": ".", "x-preview": api}} if api else {}),
                         **services}}


# What a compose file may declare --------------------------------------------------------------------------------


def test_the_documented_declaration_is_read_with_its_defaults() -> None:
    routes, problems = declared_routes(compose_with({"route": "api", "port": 8081}), "compose.preview.yml")
    assert problems == []
    [api] = routes
    assert (api.service, api.route, api.port, api.health_check_path, api.variable) == ("api", "api", 8081, "/",
                                                                                        "API")


@pytest.mark.parametrize(("declared", "problem"), [
    ({"route": "API", "port": 8081}, "route must be 1-16 lower-case letters and digits"),
    ({"route": "my-api", "port": 8081}, "route must be 1-16 lower-case letters and digits"),  # no `--` trick
    ({"route": "a" * 17, "port": 8081}, "route must be 1-16 lower-case letters and digits"),
    ({"route": "app", "port": 8081}, "and not app"),
    ({"route": "${ROUTE}", "port": 8081}, "route must be"),  # literal only: compose does not interpolate it
    ({"route": "api", "port": True}, "port must be a number from 1 to 65535"),
    ({"route": "api", "port": "8081"}, "port must be a number from 1 to 65535"),
    ({"route": "api", "port": 70000}, "port must be a number from 1 to 65535"),
    ({"route": "api", "port": 8081, "health_check_path": "health"}, "health_check_path must start with /"),
    ({"route": "api", "port": 8081, "health_check_path": "/a b"}, "health_check_path must start with /"),
    ({"route": "api", "port": 8081, "health_check_path": "/ok\n"}, "health_check_path must start with /"),
    ({"route": "api", "port": 8081, "host": "evil.example"}, "must be a mapping of route, port"),
    ({"route": "api"}, "must be a mapping of route, port"),
    ("api", "must be a mapping of route, port"),
])
def test_a_declaration_outside_its_narrow_form_is_refused_by_name(declared: Any, problem: str) -> None:
    routes, problems = declared_routes(compose_with(declared), "compose.preview.yml")
    assert routes == []
    [said] = problems
    assert said.startswith("compose.preview.yml: service api: x-preview") and problem in said, said


def test_the_app_two_routes_of_one_name_and_too_many_routes_are_refused() -> None:
    _, problems = declared_routes({"services": {"app": {"x-preview": {"route": "web", "port": 1}}}}, "c.yml")
    assert problems == ["c.yml: service app: x-preview: app is the main route (its port and health path are "
                        "preview-config.yml's)"]
    twice = compose_with({"route": "api", "port": 8081}, other={"x-preview": {"route": "api", "port": 9}})
    assert declared_routes(twice, "c.yml")[1] == ["c.yml: service other: x-preview: route api is declared twice"]
    database = {"services": {"db": {"x-preview": {"route": "db", "port": 5432}}}}
    assert declared_routes(database, "c.yml")[1] == [
        "c.yml: service db: x-preview: db cannot be routed (its host port is the preview's database port)"]
    # YAML 1.1 reads `on:` as True, compose reads "on": the name must be one both read alike, and no option
    for odd in (True, "-f", "a b"):
        said = declared_routes({"services": {odd: {"x-preview": {"route": "api", "port": 1}}}}, "c.yml")[1]
        assert said[0].endswith("a routed service's name must be letters, digits, ., _ and -, starting with a "
                                "letter or digit (quote it)"), said
    many = {"services": {f"s{n}": {"x-preview": {"route": f"r{n}", "port": 80}} for n in range(MAX_ROUTES + 1)}}
    assert declared_routes(many, "c.yml")[1] == [f"c.yml: at most {MAX_ROUTES} services may be routed besides app "
                                                 f"({MAX_ROUTES + 1} declare x-preview)"]


@pytest.mark.parametrize(("doc", "heading"), [("routing.md", "## Several routed services"),
                                            ("plugins.md", "### A frontend and its API in one repository")])
def test_docs_show_the_example_s_compose_file_as_written(doc: str, heading: str) -> None:
    section = (EXAMPLE.parents[1] / "docs" / doc).read_text().split(heading, 1)[1]
    shown = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert shown == (EXAMPLE / "compose.preview.yml").read_text()


def render_example(host: PluginHost, root: Path, pr: int = 3):  # noqa: ANN201
    repo = root / "repo"
    shutil.copytree(EXAMPLE, repo)
    context = make_context("acme", "shop", pr, 8003, 9003, b"k")
    return render_deployment(host, repo, load_checkout_config(host, repo), context,
                             Compose(60, HostEnv.for_state_dir(repo)).normalized)  # the real `docker compose config`


def test_the_example_s_api_is_published_on_its_port_of_127_0_0_1_and_every_service_learns_the_urls(
        host: PluginHost, tmp_path: Path) -> None:
    rendered = render_example(host, tmp_path)
    assert [(r.service, r.route, r.port, r.health_check_path) for r in rendered.routes] == [
        ("api", "api", 8081, "/health")]
    main, api = "http://x/acme-shop/pr-3/", "http://x/acme-shop/pr-3/api/"
    apply_routes(rendered, {"api": 8004}, main, {"api": api})
    services = rendered.compose["services"]
    assert services["api"]["ports"] == ["127.0.0.1:8004:8081"] and services["api"]["init"] is True
    assert services["app"]["ports"] == ["127.0.0.1:8003:8000"]
    for service in services.values():
        assert {key: service["environment"][key] for key in ("PREVIEW_URL", "PREVIEW_URL_API",
                                                             "PREVIEW_INTERNAL_URL_API")} == {
            "PREVIEW_URL": main, "PREVIEW_URL_API": api, "PREVIEW_INTERNAL_URL_API": "http://api:8081"}
    assert "127.0.0.1:8004:8081" in rendered.files[rendered.compose_file]  # what is written is what was given


@pytest.mark.parametrize(("option", "problem"), [
    ("profiles: [later]", "routed (x-preview) but not run by compose"),  # a profile leaves it out
    ("network_mode: service:app", "routed (x-preview) services use the preview's network (no network_mode)"),
])
def test_a_routed_service_compose_could_not_publish_is_refused(host: PluginHost, tmp_path: Path, option: str,
                                                               problem: str) -> None:
    """Judged in the form compose runs."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo)
    text = (repo / "compose.preview.yml").read_text()
    (repo / "compose.preview.yml").write_text(text.replace("    command:", f"    {option}\n    command:"))
    with pytest.raises(ConfigError) as refused:
        render_deployment(host, repo, load_checkout_config(host, repo), make_context("acme", "shop", 3, 8003, 9003,
                                                                                        b"k"),
                          Compose(60, HostEnv.for_state_dir(repo)).normalized)
    assert f"compose.preview.yml: service api: {problem}" in refused.value.problems


# Ports and names ------------------------------------------------------------------------------------------------


def test_a_route_keeps_its_port_across_updates_and_gives_it_back_when_it_goes() -> None:
    mine = PortAllocation(exposedAppPort=8000, exposedDbPort=9000)
    other = PortAllocation(exposedAppPort=8001, exposedDbPort=9001, routedPorts={"web": 8002})
    first = routed_ports(mine, ["api", "docs"], [other], set(), lambda port: True)
    assert first.routedPorts == {"api": 8003, "docs": 8004}  # the lowest free of the app pool, others' skipped
    assert routed_ports(first, ["docs", "api"], [other], {8003}, lambda port: True) == first  # kept
    fewer = routed_ports(first, ["docs"], [other], set(), lambda port: True)
    assert fewer.routedPorts == {"docs": 8004}
    # a new preview never gets a port another preview's route holds
    taken = [mine, first, other]
    assert allocate(7, taken, set(), lambda port: True) == PortAllocation(exposedAppPort=8005, exposedDbPort=9002)
    # the store's shape stays the spec's for a preview that routes nothing besides its app
    assert mine.model_dump(mode="json") == {"exposedAppPort": 8000, "exposedDbPort": 9000}
    assert first.model_dump(mode="json")["routedPorts"] == {"api": 8003, "docs": 8004}


def test_a_route_s_host_label_fits_one_dns_label_and_never_equals_another_s() -> None:
    assert route_host_label("api", "acme-shop", 12) == "api--acme-shop-pr-12"
    long_slug = "acme-" + "x" * 90
    labels = {route_host_label(name, slug, pr) for name in ("api", "a", "a" * 16) for slug in (long_slug, "acme-shop",
                                                                                              long_slug + "-y")
              for pr in (1, 4_000_000_000)}
    assert len(labels) == 18
    for label in labels:
        assert len(label) <= DNS_LABEL_MAX
        name, _, rest = label.partition("--")
        assert name.isalnum() and rest  # the first `--` ends the route's name: one name, one preview's label
    mains = {preview_host_label(slug, pr) for slug in (long_slug, "acme-shop", long_slug + "-y", "api")
             for pr in (1, 4_000_000_000)}
    assert not labels & mains
    with pytest.raises(ValueError, match="cannot name a route"):
        route_host_label("a-b", "acme-shop", 1)


# nginx: each route answers from its own service ---------------------------------------------------------------


@contextmanager
def serve_text(text: str, deployment: str | None = None) -> Iterator[int]:
    """A service answering `{text} {path}` and the prefix nginx says it is under; with `deployment`, as a route of
    that preview would (its X-Preview-Deployment header)."""

    class Answer(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = f"{text} {self.path} prefix={self.headers.get('X-Forwarded-Prefix', '')}".encode()
            if self.path in ("/go-home", "/go-app"):
                self.send_response(302)
                self.send_header("Location", "/home" if self.path == "/go-home" else "/acme-api/pr-3/login")
            else:
                self.send_response(200)
            if deployment:
                self.send_header("X-Preview-Deployment", deployment)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def proxy_for(nginx: Nginx, routing: Routing) -> Proxy:
    return Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                 public_host=f"127.0.0.1:{nginx.port}", listen_port=nginx.port, routing=routing)


@pytest.mark.parametrize("mode", ["path", "host"])
def test_each_route_answers_from_its_own_service_with_the_app_s_protection(tmp_path: Path, mode: str) -> None:
    with nginx_where_workers_look("po-routed-", all_addresses=mode == "host") as nginx:
        users = nginx.routes / "users"  # where nginx's workers can read it
        subprocess.run(["htpasswd", "-bcB", str(users), "reviewer", "secret"], check=True, capture_output=True)
        users.chmod(0o644)
        routing = Routing(mode=mode, domain=DOMAIN, protection="basic", users_file=users, sleep=True,
                          wake_key=tmp_path / "wake.key")
        proxy = proxy_for(nginx, routing)
        with serve_text("app") as app, serve_text("api") as api:
            proxy.install("acme-api", 3, "acme-api-3", app, None, subject=subject_of("acme-api-3"),
                          routes=[("api", api)])
            proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
            proxy.wait_routes_served("acme-api", 3, "acme-api-3", [("api", api)], None, FlowControl(60))
            auth = ("reviewer", "secret")
            if mode == "path":
                base = f"{nginx.url}/acme-api/pr-3"

                def get(route: str, path: str, **kwargs: Any) -> httpx.Response:
                    return web.get(f"{base}/{route}{path}", timeout=10, **kwargs)
            else:
                def get(route: str, path: str, **kwargs: Any) -> httpx.Response:
                    host = f"{route.rstrip('/') + '--' if route else ''}acme-api-pr-3.{DOMAIN}"
                    return web.get(f"{nginx.url}{path}", headers={"Host": host}, timeout=10, **kwargs)

            prefix = "/acme-api/pr-3" if mode == "path" else ""
            assert get("", "/x", auth=auth).text == f"app /x prefix={prefix}"
            answer = get("api/" if mode == "path" else "api", "/x?y=1", auth=auth)
            assert answer.text == f"api /x?y=1 prefix={prefix + '/api' if prefix else ''}"
            assert answer.headers["x-preview-deployment"] == "acme-api-3"
            assert get("api/" if mode == "path" else "api", "/x").status_code == 401  # the app's protection
            if mode == "path":  # a redirect of the api to its own root stays under its route; one to the app's
                moved = get("api/", "/go-home", auth=auth)  # pages (under the preview's prefix) is left alone
                assert moved.status_code == 302
                assert moved.headers["location"] == f"http://127.0.0.1:{nginx.port}/acme-api/pr-3/api/home"
                assert get("api/", "/go-app", auth=auth).headers["location"] == "/acme-api/pr-3/login"
            # closed (the flag gone): every route of the preview answers nginx's closed 404
            proxy.flag_path("acme-api", 3).unlink()
            closed = get("api/" if mode == "path" else "api", "/x", auth=auth)
            assert closed.status_code == 404 and closed.headers["x-preview-closed"] == "acme-api-3"
            proxy.open("acme-api", 3)
            # the api's own wake location says which route it is; the app's says none (a client cannot choose)
            text = proxy.path("acme-api", 3).read_text()
            assert 'proxy_set_header X-Preview-Route "api";' in text and 'X-Preview-Route "";' in text
            proxy.remove("acme-api", 3, None)
            assert get("api/" if mode == "path" else "api", "/x", auth=auth).headers.get(
                "x-preview-deployment") is None


def test_a_route_of_an_older_version_is_renewed_with_its_routed_services(tmp_path: Path) -> None:
    with nginx_where_workers_look("po-routed-") as nginx:
        proxy = proxy_for(nginx, Routing(sleep=True, wake_key=nginx.routes / "wake.key"))
        with serve_text("app") as app, serve_text("api") as api:
            proxy.install("acme-api", 3, "acme-api-3", app, None, subject=subject_of("acme-api-3"),
                          routes=[("api", api)])
            path = proxy.path("acme-api", 3)
            current = path.read_text()
            path.write_text(current.replace('    proxy_set_header X-Preview-Route "api";\n', ""))  # as before
            assert proxy.renew([("acme-api", 3, "acme-api-3", subject_of("acme-api-3"), [("api", api)])]) == [
                "acme-api-3"]
            assert path.read_text() == current  # the api's location and wake kept, where they proxied to
            proxy.wait_routes_served("acme-api", 3, "acme-api-3", [("api", api)], None, FlowControl(60))


def test_a_request_to_a_sleeping_preview_s_route_is_handed_back_to_that_route_s_service(
        make_settings: SettingsFactory, handler: RecordingHandler, tmp_path: Path) -> None:
    settings = make_settings(preview_idle_minutes=30)
    client = testing.TestClient(create_app(settings, handler))
    key = read_or_create(settings.preview_wake_key_path, random_key)
    route = PreviewRoute(name="api", service="api", port=8010, healthCheckPath="/health", url="http://x/")
    track(tmp_path / "state" / "deployments.json", sample_record(3, wokeAt=datetime.now(UTC), routes=[route]))
    headers = {"X-Preview-Wake-Key": wake_key(key, subject_of("acme-api-3")), "X-Request-Age": "3600"}

    def handed(uri: str, route_header: str | None) -> str:
        extra = {"X-Preview-Route": route_header} if route_header is not None else {}
        answer = client.simulate_get("/api/preview-wake/acme-api-3",
                                     headers={**headers, "X-Original-URI": uri, **extra})
        return answer.headers["x-accel-redirect"]

    assert handed("/acme-api/pr-3/api/items?q=1", "api") == f"{ROUTE_WOKEN_PREFIX}acme-api-3/api/items?q=1"
    assert handed("/acme-api/pr-3/items", "") == f"{WOKEN_PREFIX}acme-api-3/items"
    # a route the record does not have is the app's; a path outside the route's prefix is its root
    assert handed("/acme-api/pr-3/items", "admin") == f"{WOKEN_PREFIX}acme-api-3/items"
    assert handed("/acme-api/pr-3/other", "api") == f"{ROUTE_WOKEN_PREFIX}acme-api-3/api/"
    assert handed("/acme-api/pr-3/api/../../x", "api") == f"{ROUTE_WOKEN_PREFIX}acme-api-3/api/"


def test_the_ready_comment_lists_every_routed_service_under_the_main_link() -> None:
    text = comments.ready("http://x/a/pr-1/", "a" * 40, 3.0, routes=[("api", "http://x/a/pr-1/api/?t=1")])
    assert text.index("**http://x/a/pr-1/**") < text.index("- `api`: http://x/a/pr-1/api/?t=1")
    assert "Also routed" not in comments.ready("http://x/a/pr-1/", "a" * 40, 3.0)


# Through the real flows, without Docker -------------------------------------------------------------------------


class ReadingRuntime(RecordingRuntime):
    """The seam's recording runtime, reading a repository's compose file as compose does."""

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        return Compose(60, HostEnv.for_state_dir(compose_file.parent)).normalized(compose_file, deployment_id)


@pytest.fixture
def codehost() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost().start()
    yield fake
    fake.stop()


# Commit B of a repository whose API stops at its start.
API_FAILS = {"api.py": "import sys\n\nprint('the API cannot start: API_KEY is not set', flush=True)\nsys.exit(3)\n"}


def example_repo(root: Path, branch: str, files_b: dict[str, str] | None = None) -> PullRequestRepo:
    """examples/web-and-api as written, its base image the stand-in (what IMAGE_OVERRIDES does for templates)."""
    dockerfile = (EXAMPLE / "Dockerfile").read_text()
    image = dockerfile.splitlines()[0].removeprefix("FROM ")
    return make_pr_repo(root, str(EXAMPLE), branch, files_b=files_b,
                        files={"Dockerfile": dockerfile.replace(image, STANDIN_OVERRIDES[image], 1)})


def test_a_routed_service_that_stopped_is_a_problem_and_one_that_once_restarted_is_not(
        make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compose runtime's `service_problem`: the app's and database's containers are new on every start, so any
    restart count of theirs is a crash loop; a routed service the update left running may have restarted once days
    ago (its database was reset), and only its state says whether it runs."""
    runtime = engine_for(make_settings()).runtime
    states = {"app": {"Status": "running", "RestartCount": 0},
              "api": {"Status": "running", "RestartCount": 2, "ExitCode": 0}}
    monkeypatch.setattr(runtime.docker, "container_states", lambda deployment_id: states)
    assert runtime.problem("acme-api-3") is None and runtime.service_problem("acme-api-3", "api") is None
    states["api"] = {"Status": "exited", "RestartCount": 0, "ExitCode": 3}
    assert runtime.service_problem("acme-api-3", "api") == "api exited with code 3"
    states["api"] = {"Status": "restarting", "RestartCount": 1, "ExitCode": 3}
    assert runtime.service_problem("acme-api-3", "api") == "api is restarting (exit code 3)"
    states["app"] = {"Status": "running", "RestartCount": 1}
    assert runtime.problem("acme-api-3") == "app is restarting (restarted 1 time)"


def test_a_runtime_that_cannot_route_services_fails_the_deploy_and_says_so(
        make_settings: SettingsFactory, codehost: FakeCodeHost, tmp_path: Path) -> None:
    runtime = ReadingRuntime(1)
    engine, _ = engine_with(runtime, make_settings, codehost)
    repo = example_repo(tmp_path / "git", "feature/system")
    with pytest.raises(FlowError, match=r"The recording runtime cannot route services besides app \(x-preview of "
                                        r"api\)"):
        engine.handle(event("opened", repo, repo.sha_a))
    assert "build" not in [name for name, _ in runtime.calls]
    assert engine.store.read().deployments["acme-api-3"].status == "failed"


def test_the_flows_give_each_route_a_port_a_record_entry_a_location_and_a_line_in_the_comment(
        make_settings: SettingsFactory, codehost: FakeCodeHost, tmp_path: Path) -> None:
    # the app and its api answer on `port`; nginx's reloads are `true`, and what answers on its port says it is
    # the preview's route (the served checks pass at once, as with a real nginx: tests with one are above)
    with serve_text("ok") as port, serve_text("nginx", deployment="acme-api-3") as nginx_port:
        runtime = ReadingRuntime(port)
        runtime.routes_services = True  # as the compose runtime
        engine, _ = engine_with(runtime, make_settings, codehost, proxy_listen_port=nginx_port,
                                max_concurrent_previews=2)
        repo = example_repo(tmp_path / "git", "feature/system")
        engine.handle(event("opened", repo, repo.sha_a))
        # its two routes are one preview against MAX_CONCURRENT_PREVIEWS: room for one more, not for two
        fourth, fifth = (event("opened", repo, repo.sha_a).model_copy(update={
            "pr_number": n, "deployment_id": f"acme-api-{n}", "delivery_id": f"opened-{n}"}) for n in (4, 5))
        assert engine.deploy_flow.refusal(fourth) is None
        track(tmp_path / "state" / "deployments.json", sample_record(4))
        assert engine.deploy_flow.refusal(fifth) == engine.context.limit_message()
        data = engine.store.read()
        record, allocation = data.deployments["acme-api-3"], data.portAllocations["acme-api-3"]
        assert record.status == "running"
        [route] = record.routes
        assert route.name == "api" and route.service == "api" and route.healthCheckPath == "/health"
        assert route.url == record.url + "api/" and allocation.routedPorts == {"api": route.port}
        assert route.port in APP_POOL and route.port not in (record.exposedAppPort, record.exposedDbPort)
        compose = runtime.compose_seen[0]
        assert f"127.0.0.1:{route.port}:8081" in compose and f"PREVIEW_URL_API: {route.url}" in compose
        assert "location /acme-api/pr-3/api/ {" in (tmp_path / "proxy" / "acme-api-pr-3.conf").read_text()
        [ready] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
        assert f"- `api`: {route.url}" in ready
        engine.handle(event("synchronize", repo, repo.sha_b))  # an update keeps the route's port
        assert engine.store.read().deployments["acme-api-3"].routes == [route]
        # an update that fails before its render (a commit that is not there) keeps the routes its locations serve
        with pytest.raises(FlowError, match="Git clone or checkout failed"):
            engine.handle(event("synchronize", repo, "0" * 40))
        assert engine.store.read().deployments["acme-api-3"].routes == [route]
        engine.handle(event("closed", repo, repo.sha_b))
        assert set(engine.store.read().portAllocations) == {"acme-api-4"}


# End to end: real Docker, nginx, git and a browser ---------------------------------------------------------------


def deploy_example(stack: Stack, pr: int, branch: str,
                   files_b: dict[str, str] | None = None) -> tuple[PullRequestRepo, dict[str, Any]]:
    repo = example_repo(stack.root / "repos", branch, files_b)
    stack.send("opened", pr, repo, repo.sha_a)
    return repo, stack.wait_for(pr, "running", repo.sha_a)


def published(deployment: str, service: str) -> str:
    container = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={deployment}",
                                "--filter", f"label=com.docker.compose.service={service}"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    return subprocess.run(["docker", "port", container], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


@pytest.mark.docker
@pytest.mark.live
def test_a_frontend_and_its_api_each_answer_on_their_own_path_and_find_each_other(tmp_path: Path) -> None:
    stack = start_stack(tmp_path)
    try:
        pr = 90
        repo, record = deploy_example(stack, pr, "feature/system-path")
        main = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        [route] = record["routes"]
        assert route == {"name": "api", "service": "api", "port": route["port"], "healthCheckPath": "/health",
                         "url": f"{main}api/"}
        assert published(f"{SLUG}-{pr}", "api") == f"8081/tcp -> 127.0.0.1:{route['port']}"
        hello = f"hello from the API of {main}"
        answer = web.get(f"{main}api/hello", timeout=10)
        assert answer.text == hello and answer.headers["x-preview-deployment"] == f"{SLUG}-{pr}"
        assert web.get(f"{main}server", timeout=10).text == hello  # the frontend's server, on the preview's network
        stack.wait_comment(pr, "Also routed", f"- `api`: {main}api/")
        with chromium() as browser:  # the page asks the API from the browser, through nginx
            wait_for_fetched(browser, main, "browser", hello)
            assert browser.find_element(By.ID, "server").text == hello
        stack.send("synchronize", pr, repo, repo.sha_b)
        assert stack.wait_for(pr, "running", repo.sha_b)["routes"] == [route]  # the same port and route
        assert "nginx route unchanged; not reloaded" in stack.logs(pr)
        stack.close(pr, repo, repo.sha_b)
        assert f"{SLUG}-{pr}" not in stack.store()["portAllocations"]
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_a_frontend_and_its_api_each_answer_on_their_own_host(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, nginx_all_addresses=True, PREVIEW_ROUTING="host", PREVIEW_DOMAIN=DOMAIN)
    try:
        pr = 91
        repo, record = deploy_example(stack, pr, "feature/system-host", files_b=API_FAILS)
        port = stack.nginx.port
        main = f"http://{SLUG}-pr-{pr}.{DOMAIN}:{port}/"
        api = f"http://api--{SLUG}-pr-{pr}.{DOMAIN}:{port}/"
        assert record["url"] == main and [route["url"] for route in record["routes"]] == [api]
        hello = f"hello from the API of {main}"
        answer = web.get(f"{stack.nginx.url}/hello", headers={"Host": f"api--{SLUG}-pr-{pr}.{DOMAIN}"},
                         timeout=10)
        assert answer.text == hello and answer.headers["access-control-allow-origin"] == "*"
        with chromium(resolve_to_loopback=f"*.{DOMAIN}") as browser:  # another host: the API allows the origin
            wait_for_fetched(browser, main, "browser", hello)
        # a push whose API stops at its start fails at once with the API's own words (not the health time-out)
        stack.send("synchronize", pr, repo, repo.sha_b)
        failed = stack.wait_for(pr, "failed", repo.sha_b)
        assert failed["error"].startswith("api ") and \
            failed["error"].endswith("(waiting for the route api (service api))"), failed["error"]
        stack.wait_comment(pr, "the API cannot start: API_KEY is not set")
        stack.close(pr, repo, repo.sha_b)
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_a_request_to_the_api_route_of_a_sleeping_preview_wakes_it_and_gets_the_api_s_answer(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, **IDLE)
    try:
        pr = 92
        repo, record = deploy_example(stack, pr, "feature/system-sleep")
        main = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        wait_asleep(stack, pr)
        answer = web.get(f"{main}api/hello?from=sleep", timeout=60)  # not a browser: waits for the wake
        assert answer.status_code == 200 and answer.text == f"hello from the API of {main}"
        assert stack.records()[f"{SLUG}-{pr}"]["status"] == "running"
        assert stack.logs(pr).count("a request came: waking up") == 1
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_each_route_of_a_protected_preview_opens_from_its_own_signed_link(tmp_path: Path) -> None:
    """Token protection under host routing: each route is a host of its own, so each gets its own link."""
    stack = start_stack(tmp_path, nginx_all_addresses=True, PREVIEW_ROUTING="host", PREVIEW_DOMAIN=DOMAIN,
                        PREVIEW_PROTECTION="token")
    try:
        pr = 93
        repo, record = deploy_example(stack, pr, "feature/system-token")
        port = stack.nginx.port
        api = f"http://api--{SLUG}-pr-{pr}.{DOMAIN}:{port}/"
        assert [route["url"] for route in record["routes"]] == [api]  # the record keeps the clean URLs
        comment = stack.wait_comment(pr, "Also routed")
        link = re.search(r"- `api`: (\S+)", comment)[1]
        assert link.startswith(f"{api}?preview_token=")
        with loopback_client() as stranger:
            refused = stranger.get(f"{api}hello")
            assert refused.status_code == 401 and "This preview is protected" in refused.text
        with loopback_client() as reviewer:
            opened = reviewer.get(link)
            assert opened.status_code == 302 and opened.headers["location"] == "/"
            answer = reviewer.get(f"{api}hello")
            assert answer.status_code == 200
            assert answer.text == f"hello from the API of http://{SLUG}-pr-{pr}.{DOMAIN}:{port}/"
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)
