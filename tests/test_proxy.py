"""The nginx route with a real nginx: served with the right headers, rolled back when nginx -t fails."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.adapters.nginx import FlagUnseen, Proxy, ProxyError
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from tests.support import web
from tests.support.live import wait_until
from tests.support.nginx import Nginx, nginx_where_workers_look, subject_of


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "nginx", tmp_path / "routes").start()
    yield server
    server.stop()


@pytest.fixture
def upstream() -> Iterator[int]:
    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            body = f"path={self.path}\n" + "".join(f"{k.lower()}={v}\n" for k, v in self.headers.items())
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_route_strips_the_prefix_and_forwards_headers(nginx: Nginx, upstream: int) -> None:
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes))
    proxy.install("acme-api", 3, "acme-api-3", upstream, None, subject=subject_of("acme-api-3"))
    wait_until(lambda: web.get(f"{nginx.url}/acme-api/pr-3/x?y=1").status_code == 200, timeout=10)
    nginx.wait_settled()
    echoed = web.get(f"{nginx.url}/acme-api/pr-3/items?y=1", headers={"Connection": "Upgrade",
                                                                         "Upgrade": "websocket"}).text
    assert "path=/items?y=1" in echoed
    assert "x-forwarded-prefix=/acme-api/pr-3" in echoed and "x-real-ip=127.0.0.1" in echoed
    assert "x-forwarded-proto=http" in echoed and "x-forwarded-for=127.0.0.1" in echoed
    assert "upgrade=websocket" in echoed and "connection=Upgrade" in echoed
    text = proxy.path("acme-api", 3).read_text()
    assert "proxy_read_timeout 300s;" in text and "proxy_connect_timeout 75s;" in text
    proxy.remove("acme-api", 3, None)
    assert not proxy.path("acme-api", 3).exists()
    wait_until(lambda: web.get(f"{nginx.url}/acme-api/pr-3/").status_code == 404, timeout=10)


def test_a_failing_test_restores_the_previous_route(nginx: Nginx, upstream: int) -> None:
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes))
    proxy.install("acme-api", 3, "acme-api-3", upstream, None, subject=subject_of("acme-api-3"))
    wait_until(lambda: web.get(f"{nginx.url}/acme-api/pr-3/").status_code == 200, timeout=10)
    nginx.wait_settled()
    before = proxy.path("acme-api", 3).read_text()
    (nginx.routes / "zz-broken.conf").write_text("this is not nginx config;\n")
    with pytest.raises(ProxyError):
        proxy.install("acme-api", 3, "acme-api-3", upstream + 1, None, subject=subject_of("acme-api-3"))
    assert proxy.path("acme-api", 3).read_text() == before
    with pytest.raises(ProxyError):
        proxy.install("acme-api", 4, "acme-api-4", upstream, None, subject=subject_of("acme-api-4"))
    assert not proxy.path("acme-api", 4).exists()
    (nginx.routes / "zz-broken.conf").unlink()
    assert web.get(f"{nginx.url}/acme-api/pr-3/").status_code == 200  # the running config was never broken


def test_an_unchanged_served_route_is_not_reloaded(tmp_path: Path) -> None:
    # Commands that leave a trace instead of nginx: the point is which ones run.
    trace = tmp_path / "trace"
    proxy = Proxy(tmp_path / "routes", f"sh -c 'echo test >> {trace}'", f"sh -c 'echo reload >> {trace}'",
                  HostEnv.for_state_dir(tmp_path))
    proxy.install("acme-api", 3, "acme-api-3", 8003, None, subject=subject_of("acme-api-3"))
    assert trace.read_text() == "test\nreload\n"
    # an update, same port
    proxy.install("acme-api", 3, "acme-api-3", 8003, None, served=True, subject=subject_of("acme-api-3"))
    assert trace.read_text() == "test\nreload\n"
    # not known to be served: reloaded anyway
    proxy.install("acme-api", 3, "acme-api-3", 8003, None, subject=subject_of("acme-api-3"))
    # changed: reloaded
    proxy.install("acme-api", 3, "acme-api-3", 8004, None, served=True, subject=subject_of("acme-api-3"))
    assert trace.read_text() == "test\nreload\n" * 3


@pytest.fixture
def login_app() -> Iterator[int]:
    """Behaves like an ordinary Flask or Express app with a login, that knows nothing of a prefix."""
    class App(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/":
                self.send_response(302)
                self.send_header("Location", "/auth/login?next=%2F")
            elif self.path.startswith("/auth/login"):
                self.send_response(200)
                self.send_header("Set-Cookie", "session=abc; Path=/; HttpOnly")
                self.send_header("Set-Cookie", "pref=dark; Path=/settings")
            elif self.path == "/away":
                self.send_response(302)
                self.send_header("Location", "https://accounts.example.org/oauth?return=/")
            elif self.path == "/absolute":
                self.send_response(302)
                self.send_header("Location", f"http://{self.headers['Host']}/dashboard")
            else:
                self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), App)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_redirects_and_cookies_of_an_app_that_ignores_the_prefix_stay_under_it(nginx: Nginx, login_app: int) -> None:
    public = f"127.0.0.1:{nginx.port}"
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  public_host=public, listen_port=nginx.port)
    proxy.install("acme-api", 3, "acme-api-3", login_app, None, subject=subject_of("acme-api-3"))
    proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
    root = web.get(f"{nginx.url}/acme-api/pr-3/")
    # Absolute, with the host the browser asked for (nginx would otherwise put its own server name there).
    assert root.status_code == 302
    assert root.headers["location"] == f"http://{public}/acme-api/pr-3/auth/login?next=%2F"
    assert root.headers["x-preview-deployment"] == "acme-api-3"
    login = web.get(root.headers["location"])
    assert login.status_code == 200
    cookies = login.headers.get_list("set-cookie")
    assert "session=abc; Path=/acme-api/pr-3/; HttpOnly" in cookies
    assert "pref=dark; Path=/acme-api/pr-3/settings" in cookies
    # An absolute redirect to the public host comes back under the prefix; one to another host is left alone.
    absolute = web.get(f"{nginx.url}/acme-api/pr-3/absolute")
    assert absolute.headers["location"] == f"http://{public}/acme-api/pr-3/dashboard"
    away = web.get(f"{nginx.url}/acme-api/pr-3/away")
    assert away.headers["location"] == "https://accounts.example.org/oauth?return=/"


def test_the_served_wait_tells_the_route_from_nginx_own_404(nginx: Nginx, login_app: int) -> None:
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  public_host="localhost", listen_port=nginx.port)
    with pytest.raises(ProxyError, match=r"Nginx route not served after 1s: .* answered 404 without"):
        proxy.wait_served("acme-api", 9, "acme-api-9", None, FlowControl(60), timeout=1)  # no route installed
    nowhere = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                    listen_port=1)
    nowhere.wait_served("acme-api", 9, "acme-api-9", None, FlowControl(60), timeout=1)  # cannot check: goes on


@pytest.fixture
def open_nginx() -> Iterator[Nginx]:
    with nginx_where_workers_look() as server:
        yield server


def test_a_route_loaded_closed_opens_without_a_reload(open_nginx: Nginx, upstream: int) -> None:
    nginx = open_nginx
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  listen_port=nginx.port)
    assert proxy.flags_usable()
    # while the app builds
    proxy.install("acme-api", 3, "acme-api-3", upstream, None, closed=True, subject=subject_of("acme-api-3"))
    # Seen loaded, as the deploy sees it while the app builds (nginx applies a reload a moment after the command).
    proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60), closed=True)
    closed = web.get(f"{nginx.url}/acme-api/pr-3/")
    assert closed.status_code == 404 and closed.headers["X-Preview-Closed"] == "acme-api-3"  # as if it did not exist
    assert "X-Preview-Deployment" not in closed.headers  # the served check does not take it for the route
    with pytest.raises(ProxyError, match="not served"):
        proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60), timeout=0.5)
    workers = nginx.workers()
    proxy.open("acme-api", 3)  # the app is healthy
    proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
    assert "path=/x" in web.get(f"{nginx.url}/acme-api/pr-3/x").text
    assert nginx.workers() == workers  # no reload: the flag is looked at on every request
    # Closed at once by a cleanup, before nginx's reload; and no flag is left.
    proxy.remove("acme-api", 3, None)
    assert not proxy.flag_path("acme-api", 3).exists()
    wait_until(lambda: web.get(f"{nginx.url}/acme-api/pr-3/").status_code == 404, timeout=10)
    # Workers found not to see the flags (FlagUnseen): no flags after a restart either, until the mark is removed.
    proxy.stop_using_flags()
    restarted = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes))
    assert not restarted.flags_usable()
    assert "if (!-f" not in restarted.route("acme-api", 5, "acme-api-5", upstream, subject=subject_of("acme-api-5"))


def test_the_served_check_waits_out_the_old_workers_of_a_reload(open_nginx: Nginx, upstream: int) -> None:
    nginx = open_nginx
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  listen_port=nginx.port)
    for pr in range(1, 6):  # nginx keeps its old workers 0.1 s after a reload: none answers after `served`
        proxy.install("acme-api", pr, f"acme-api-{pr}", upstream, None, subject=subject_of(f"acme-api-{pr}"))
        proxy.wait_served("acme-api", pr, f"acme-api-{pr}", None, FlowControl(60))
        answers = [web.get(f"{nginx.url}/acme-api/pr-{pr}/").status_code for _ in range(20)]
        assert answers == [200] * 20, (pr, answers)


def test_routes_carry_no_flag_where_nginx_s_workers_cannot_look(nginx: Nginx, upstream: int) -> None:
    # pytest's temporary directory is private to root: nginx's workers (nobody) cannot look at a flag there.
    proxy = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                  listen_port=nginx.port)
    assert not proxy.flags_usable()
    with pytest.raises(ProxyError, match="cannot be loaded closed"):
        proxy.install("acme-api", 3, "acme-api-3", upstream, None, closed=True, subject=subject_of("acme-api-3"))
    # opens with the reload, as before flags
    proxy.install("acme-api", 3, "acme-api-3", upstream, None, subject=subject_of("acme-api-3"))
    assert "if (!-f" not in proxy.path("acme-api", 3).read_text()
    proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
    # Where the look at the directories is fooled (an ACL, a security module), the served check tells.
    fooled = Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                   listen_port=nginx.port)
    fooled._flags = True  # noqa: SLF001 - what flags_usable would say on such a host
    # opened, loaded: nginx cannot see the flag
    fooled.install("acme-api", 4, "acme-api-4", upstream, None, subject=subject_of("acme-api-4"))
    with pytest.raises(FlagUnseen, match="cannot look at"):
        fooled.wait_served("acme-api", 4, "acme-api-4", None, FlowControl(60))
