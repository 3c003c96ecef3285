"""What reviewers meet (docs/routing.md): path routing as transparent as a reverse proxy can be, the deploy waiting
until nginx serves the route, host routing (a server per preview, optional TLS), with a real nginx; and end to
end, the login app reached from the comment's link in both modes (Docker)."""

from __future__ import annotations

import re
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpcore
import httpx
import pytest
from selenium.webdriver.support.wait import WebDriverWait

from orchestrator.adapters.nginx import Proxy, ProxyError, Routing
from orchestrator.adapters.nginx_site import includes_routes, includes_servers, site_text
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import preview_host_label
from orchestrator.settings import SettingsError, load_settings
from tests.support import web
from tests.support.browser import chromium, open_page, page_summary
from tests.support.git_repos import make_pr_repo
from tests.support.live import free_port
from tests.support.nginx import Nginx, subject_of
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

DOMAIN = "preview.test"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


# A plain app that knows nothing of any prefix -------------------------------------------------------------


class PlainApp(BaseHTTPRequestHandler):
    """Redirects of every kind, cookies, and an echo of the request."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        port = self.server.server_address[1]
        redirects = {
            "/relative": "/auth/login?next=%2F",
            "/loopback": f"http://127.0.0.1:{port}/dashboard",
            "/public": f"http://{self.headers['Host']}/dashboard",
            "/prefixed": "/acme-api/pr-3/already/there",
            "/elsewhere": "https://accounts.example.org/oauth?return=/",
            "/other-preview": "/acme-api/pr-4/",
        }
        if self.path in redirects:
            self.send_response(302)
            self.send_header("Location", redirects[self.path])
            body = b""
        else:
            self.send_response(200)
            self.send_header("Set-Cookie", "session=abc; Path=/; HttpOnly")
            body = (f"path={self.path}\n" + "".join(f"{k.lower()}={v}\n" for k, v in self.headers.items())).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serve_app(handler: type[BaseHTTPRequestHandler] = PlainApp) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def app() -> Iterator[int]:
    with serve_app() as port:
        yield port


def make_proxy(nginx: Nginx, routing: Routing | None = None, public: str | None = None) -> Proxy:
    return Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                 public_host=public or f"127.0.0.1:{nginx.port}", listen_port=nginx.port, routing=routing)


def make_certificate(directory: Path, domain: str = DOMAIN) -> tuple[Path, Path]:
    """A self-signed wildcard certificate, as an operator would provide one for *.{PREVIEW_DOMAIN}."""
    cert, key = directory / "wildcard.pem", directory / "wildcard.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
                    "-out", str(cert), "-subj", f"/CN=*.{domain}", "-addext", f"subjectAltName=DNS:*.{domain}"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class Loopback(httpcore.SyncBackend):
    """Every connection goes to 127.0.0.1, whatever the URL's host: the wildcard DNS record of a real host."""

    def connect_tcp(self, host: str, port: int, *args: object, **kwargs: object) -> httpcore.NetworkStream:
        return super().connect_tcp("127.0.0.1", port, *args, **kwargs)  # type: ignore[arg-type]


def loopback_client(cafile: Path | None = None, **kwargs: object) -> httpx.Client:
    """A reviewer's browser for preview host names: URLs, Host, SNI, certificate checks and cookies are the
    preview's name's, the connections go to 127.0.0.1."""
    transport = httpx.HTTPTransport(verify=ssl.create_default_context(cafile=str(cafile)) if cafile else True)
    transport._pool._network_backend = Loopback()  # noqa: SLF001 - httpcore's resolver seam
    return httpx.Client(transport=transport, timeout=10, **kwargs)  # type: ignore[arg-type]


def get_via(host: str, url: str, cafile: Path | None = None, **kwargs: object) -> httpx.Response:
    """A request to 127.0.0.1 as a browser would make it to `host`: Host header, and for https the server name
    (SNI) and the certificate checked against that name."""
    if cafile is None:
        return web.get(url, headers={"Host": host}, timeout=10, **kwargs)  # type: ignore[arg-type]
    context = ssl.create_default_context(cafile=str(cafile))
    with httpx.Client(verify=context, timeout=10) as client:
        return client.get(url, headers={"Host": host}, extensions={"sni_hostname": host}, **kwargs)  # type: ignore[arg-type]


# Host names ---------------------------------------------------------------------------------------------


def test_host_labels_fit_one_dns_label_and_never_collide() -> None:
    assert preview_host_label("acme-api", 7) == "acme-api-pr-7"
    exact = "a" * (63 - len("-pr-12"))
    assert preview_host_label(exact, 12) == f"{exact}-pr-12"  # 63 characters: kept whole
    long_one, long_two = "acme-" + "x" * 90, "acme-" + "x" * 89 + "y"  # same start, different slugs
    assert preview_host_label(exact + "b", 1) == f"{exact}b-pr-1"  # fits with a short number
    labels = {preview_host_label(slug, pr) for slug in (long_one, long_two, long_one + "-z", exact + "b")
              for pr in (10, 99999)}
    assert len(labels) == 8
    for label in labels:
        assert len(label) <= 63 and re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", label), label
        assert "--" in label  # shortened: a full label never holds `--` (slugs never do)
    assert preview_host_label(long_one, 5) == preview_host_label(long_one, 5)  # stable
    assert preview_host_label(long_one, 5).startswith("acme-xxxx")
    for bad in ("Acme", "a--b", "-a", "a_b", "a.b", ""):
        with pytest.raises(ValueError, match="cannot make a host name"):
            preview_host_label(bad, 1)


def settings_of(**values: object):  # noqa: ANN201
    return load_settings(_env_file=None, codehost_webhook_secret="s" * 20, **values)


def test_host_routing_needs_a_domain_and_urls_follow_it(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as refused:
        settings_of(preview_routing="host")
    assert refused.value.lines[0].startswith("PREVIEW_DOMAIN is required when PREVIEW_ROUTING=host")
    plain = settings_of(preview_routing="host", preview_domain=DOMAIN)
    assert plain.preview_url("acme-api", 7) == f"http://acme-api-pr-7.{DOMAIN}/"
    assert settings_of(preview_routing="host", preview_domain=DOMAIN, proxy_listen_port=8080).preview_url(
        "acme-api", 7) == f"http://acme-api-pr-7.{DOMAIN}:8080/"
    cert, key = make_certificate(tmp_path)
    tls = settings_of(preview_routing="host", preview_domain=DOMAIN, preview_tls_cert=cert, preview_tls_key=key)
    assert tls.preview_url("acme-api", 7) == f"https://acme-api-pr-7.{DOMAIN}/"
    assert settings_of(preview_routing="host", preview_domain=DOMAIN, preview_tls_cert=cert, preview_tls_key=key,
                       preview_tls_port=8443).preview_url("acme-api", 7) == f"https://acme-api-pr-7.{DOMAIN}:8443/"
    assert settings_of(preview_base_url="https://previews.example.org").preview_url(
        "acme-api", 7) == "https://previews.example.org/acme-api/pr-7/"  # path routing: unchanged
    for values, message in [
        ({"preview_tls_cert": cert}, "PREVIEW_TLS_CERT and PREVIEW_TLS_KEY go together"),
        ({"preview_tls_cert": cert, "preview_tls_key": key, "preview_routing": "path"},
         "PREVIEW_TLS_CERT is for PREVIEW_ROUTING=host"),
        ({"preview_tls_cert": tmp_path / "none.pem", "preview_tls_key": key}, "PREVIEW_TLS_CERT names no file"),
        ({"preview_tls_cert": "relative.pem", "preview_tls_key": key}, "PREVIEW_TLS_CERT must be an absolute path"),
        ({"preview_domain": "Bad_Domain"}, "PREVIEW_DOMAIN is not valid"),
    ]:
        values = {"preview_routing": "host", "preview_domain": DOMAIN} | values
        with pytest.raises(SettingsError) as refused:
            settings_of(**values)
        assert any(line.startswith(message) for line in refused.value.lines), refused.value.lines


# Path routing with a real nginx ---------------------------------------------------------------------------


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "nginx", tmp_path / "routes").start()
    yield server
    server.stop()


def test_path_routes_bring_every_redirect_to_the_app_s_root_back_under_the_prefix(nginx: Nginx, app: int) -> None:
    public = f"127.0.0.1:{nginx.port}"
    proxy = make_proxy(nginx)
    proxy.install("acme-api", 3, "acme-api-3", app, None, subject=subject_of("acme-api-3"))
    proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
    base = f"{nginx.url}/acme-api/pr-3"

    def location(path: str) -> str:
        response = web.get(f"{base}{path}", timeout=10)
        assert response.status_code == 302 and response.headers["x-preview-deployment"] == "acme-api-3"
        return response.headers["location"]

    assert location("/relative") == f"http://{public}/acme-api/pr-3/auth/login?next=%2F"
    assert location("/loopback") == f"http://{public}/acme-api/pr-3/dashboard"  # the app's own address
    assert location("/public") == f"http://{public}/acme-api/pr-3/dashboard"
    assert location("/prefixed") == "/acme-api/pr-3/already/there"  # a prefix-aware app: never prefixed twice
    assert location("/elsewhere") == "https://accounts.example.org/oauth?return=/"  # another host: untouched
    # a redirect to another preview's path is the app's root like any other: it stays in this preview
    assert location("/other-preview") == f"http://{public}/acme-api/pr-3/acme-api/pr-4/"
    page = web.get(f"{base}/x?y=1", timeout=10)
    assert "path=/x?y=1" in page.text and "x-forwarded-prefix=/acme-api/pr-3" in page.text
    assert f"x-forwarded-host={public}" in page.text
    assert page.headers["set-cookie"] == "session=abc; Path=/acme-api/pr-3/; HttpOnly"
    assert page.headers["x-preview-deployment"] == "acme-api-3"
    # nginx's own pages carry no such header: that is how the deploy tells them apart
    assert "x-preview-deployment" not in web.get(f"{nginx.url}/acme-api/pr-9/", timeout=10).headers


def test_the_route_probe_fails_with_the_last_status_when_nginx_does_not_serve_the_route(nginx: Nginx) -> None:
    # The route is written and nginx -t passes, but nginx is never reloaded (a reload command that does nothing).
    proxy = Proxy(nginx.routes, nginx.test_command, "true", HostEnv.for_state_dir(nginx.routes),
                  public_host=f"127.0.0.1:{nginx.port}", listen_port=nginx.port)
    with serve_app() as port:
        proxy.install("acme-api", 5, "acme-api-5", port, None, subject=subject_of("acme-api-5"))
        with pytest.raises(ProxyError, match=r"Nginx route not served after 1s: .*/acme-api/pr-5/ .*answered 404 "
                                             r"without the preview's X-Preview-Deployment"):
            proxy.wait_served("acme-api", 5, "acme-api-5", None, FlowControl(60), timeout=1)


def test_setup_nginx_site_includes_the_servers_at_http_level_and_doctor_can_tell(tmp_path: Path) -> None:
    settings = settings_of(proxy_config_dir=tmp_path / "routes", preview_routing="host", preview_domain=DOMAIN)
    text = site_text(settings, ["/webhook/codehost", "/webhook/github"])
    server_end = text.rindex("}")
    assert text.index(f"include {tmp_path / 'routes'}/servers/*.conf;") > server_end  # outside the server
    assert includes_servers(text, tmp_path / "routes") and includes_routes(text, tmp_path / "routes")
    assert not includes_servers(f"include {tmp_path / 'routes'}/*.conf;", tmp_path / "routes")
    assert not includes_servers(f"# include {tmp_path / 'routes'}/servers/*.conf;", tmp_path / "routes")


# Host routing with a real nginx ----------------------------------------------------------------------------


@pytest.fixture
def nginx_all(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "nginx", tmp_path / "routes", all_addresses=True).start()
    yield server
    server.stop()


def test_host_routing_gives_each_preview_a_server_of_its_own(nginx_all: Nginx, app: int) -> None:
    nginx = nginx_all
    proxy = make_proxy(nginx, Routing(mode="host", domain=DOMAIN))
    proxy.install("acme-api", 3, "acme-api-3", app, None, subject=subject_of("acme-api-3"))
    assert proxy.path("acme-api", 3) == nginx.routes / "servers" / "acme-api-pr-3.conf"
    assert not (nginx.routes / "acme-api-pr-3.conf").exists()
    proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
    host = f"acme-api-pr-3.{DOMAIN}"
    page = get_via(host, f"{nginx.url}/items?y=1")
    assert page.status_code == 200 and page.headers["x-preview-deployment"] == "acme-api-3"
    assert "path=/items?y=1" in page.text and f"host={host}" in page.text
    assert "x-forwarded-prefix" not in page.text  # no prefix: the app is at the root of its host
    assert page.headers["set-cookie"] == "session=abc; Path=/; HttpOnly"  # the host's own: nothing to scope
    # the app's redirects are relative to its own host
    assert get_via(host, f"{nginx.url}/relative").headers["location"] == "/auth/login?next=%2F"
    # another name, or the path form, is not this preview
    assert get_via(f"acme-api-pr-4.{DOMAIN}", f"{nginx.url}/").status_code == 404
    assert web.get(f"{nginx.url}/acme-api/pr-3/", timeout=10).status_code == 404
    # switching back to path routing replaces the server by a location
    path_proxy = make_proxy(nginx)
    path_proxy.install("acme-api", 3, "acme-api-3", app, None, subject=subject_of("acme-api-3"))
    assert not proxy.path("acme-api", 3).exists() and path_proxy.path("acme-api", 3).exists()
    path_proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
    path_proxy.remove("acme-api", 3, None)
    assert list(nginx.routes.rglob("*.conf")) == []


def test_host_routing_with_a_wildcard_certificate_serves_https_and_redirects_http(
        nginx_all: Nginx, app: int, tmp_path: Path) -> None:
    nginx = nginx_all
    cert, key = make_certificate(tmp_path)
    tls_port = free_port()
    proxy = make_proxy(nginx, Routing(mode="host", domain=DOMAIN, tls_cert=cert, tls_key=key, tls_port=tls_port))
    long_slug = "codertocat-" + "a-really-long-repository-name" * 3
    label = preview_host_label(long_slug, 8)
    proxy.install(long_slug, 8, f"{long_slug}-8", app, None, subject=subject_of(f"{long_slug}-8"))
    proxy.wait_served(long_slug, 8, f"{long_slug}-8", None, FlowControl(60))
    host = f"{label}.{DOMAIN}"
    page = get_via(host, f"https://127.0.0.1:{tls_port}/x", cafile=cert)  # the certificate is checked for host
    assert page.status_code == 200 and "path=/x" in page.text and "x-forwarded-proto=https" in page.text
    plain = get_via(host, f"{nginx.url}/x?y=1")
    assert plain.status_code == 301 and plain.headers["location"] == f"https://{host}:{tls_port}/x?y=1"
    assert plain.headers["x-preview-deployment"] == f"{long_slug}-8"
    assert urlsplit(settings_of(preview_routing="host", preview_domain=DOMAIN, preview_tls_cert=cert,
                                preview_tls_key=key, preview_tls_port=tls_port).preview_url(long_slug, 8)
                    ).hostname == host  # the comment's URL names the same host nginx serves


def test_host_route_probe_fails_without_the_server(nginx_all: Nginx) -> None:
    proxy = make_proxy(nginx_all, Routing(mode="host", domain=DOMAIN))
    with pytest.raises(ProxyError, match=rf"Nginx route not served after 1s: .*\(Host acme-api-pr-6\.{DOMAIN}\) "
                                         "answered 404 without"):
        proxy.wait_served("acme-api", 6, "acme-api-6", None, FlowControl(60), timeout=1)


# End to end: the login app from the comment's link ---------------------------------------------------------


LOGIN_CONFIG = {"framework": "python", "database": "postgres", "health_check_path": "/health", "app_port": 8000,
                "app_port_env": "PORT", "app_entrypoint": "python3 app.py"}


def comment_link(stack: Stack, pr: int) -> str:
    found = re.search(r"\*\*(\S+)\*\*", stack.wait_comment(pr, "Preview ready"))
    assert found, stack.comment(pr)
    return found[1]


def log_in_through(client: httpx.Client, link: str, prefix: str) -> None:
    """What a reviewer does: open the link, land on the login page, log in, see the app signed in — every
    address on the way under the preview's prefix."""
    first = client.get(link)
    assert first.status_code == 302
    login_url = str(httpx.URL(link).join(first.headers["location"]))
    assert urlsplit(login_url).path == f"{prefix}auth/login", login_url
    form = client.get(login_url)
    assert form.status_code == 200 and "<form" in form.text
    action = re.search(r'action="([^"]+)"', form.text)[1]  # relative: the browser resolves it under the prefix
    posted = client.post(httpx.URL(login_url).join(action), data={"user": "reviewer"})
    assert posted.status_code == 302
    landing = httpx.URL(login_url).join(posted.headers["location"])
    assert landing.path == prefix, landing
    cookie = next(c for c in client.cookies.jar if c.name == "session")
    assert cookie.path == prefix  # scoped to this preview: no other preview receives it
    page = client.get(landing)
    assert page.status_code == 200 and page.text == "signed in as reviewer\n"


def log_in_with_a_browser(link: str, prefix: str, screenshot: str, **browser_options: object) -> None:
    """The same walk in real headless Chromium: follow the link, land on the login form, sign in, end on the
    preview's own page — a screenshot of each page goes to test-artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium(**browser_options) as browser:
        open_page(browser, link)
        landed = urlsplit(browser.current_url)
        assert landed.path == f"{prefix}auth/login", page_summary(browser)
        assert browser.title == "Sign in"
        browser.save_screenshot(str(ARTIFACTS / f"{screenshot}-login.png"))
        browser.find_element("name", "user").send_keys("reviewer")
        browser.find_element("tag name", "button").click()
        WebDriverWait(browser, 10).until(lambda b: urlsplit(b.current_url).path == prefix)
        assert browser.current_url == link
        assert browser.find_element("tag name", "body").text == "signed in as reviewer"
        browser.save_screenshot(str(ARTIFACTS / f"{screenshot}-signed-in.png"))
        # no refused request on the way (a 404 would show here); the browser's own favicon guess is not the app's
        refused = [entry["message"] for entry in browser.get_log("browser")]
        assert [message for message in refused if "/favicon.ico " not in message] == []


@pytest.mark.docker
@pytest.mark.live
def test_login_app_works_from_the_comment_link_under_the_path_prefix(tmp_path: Path) -> None:
    stack = start_stack(tmp_path)
    try:
        pr = 60
        repo = make_pr_repo(stack.root / "repos", "login", "feature/login", config=LOGIN_CONFIG)
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "running", repo.sha_a)
        link = comment_link(stack, pr)
        assert link == record["url"] == f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        # `running` came only once nginx served the route: the first click is the app's, never nginx's 404
        assert web.get(link, timeout=10).headers["x-preview-deployment"] == f"{SLUG}-{pr}"
        assert "nginx serves the route" in stack.logs(pr)
        with web.Client(timeout=10) as client:
            log_in_through(client, link, f"/{SLUG}/pr-{pr}/")
        log_in_with_a_browser(link, f"/{SLUG}/pr-{pr}/", "routing-path")
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_login_app_works_on_its_own_host_with_tls(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    tls_port = free_port()
    stack = start_stack(tmp_path, nginx_all_addresses=True, PREVIEW_ROUTING="host", PREVIEW_DOMAIN=DOMAIN,
                        PREVIEW_TLS_CERT=str(cert), PREVIEW_TLS_KEY=str(key), PREVIEW_TLS_PORT=str(tls_port))
    try:
        pr = 61
        repo = make_pr_repo(stack.root / "repos", "login", "feature/login-host", config=LOGIN_CONFIG)
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "running", repo.sha_a)
        host = f"{SLUG}-pr-{pr}.{DOMAIN}"
        link = comment_link(stack, pr)
        assert link == record["url"] == f"https://{host}:{tls_port}/"
        server = stack.root / "proxy" / "servers" / f"{SLUG}-pr-{pr}.conf"
        assert server.exists() and not (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").exists()
        # HTTP on the listen port is sent to HTTPS
        plain = get_via(host, f"{stack.nginx.url}/")
        assert plain.status_code == 301 and plain.headers["location"] == link
        with loopback_client(cert) as client:
            log_in_through(client, link, "/")
        log_in_with_a_browser(link, "/", "routing-host-tls", resolve_to_loopback=f"*.{DOMAIN}",
                              trust_any_certificate=True)
        stack.close(pr, repo, repo.sha_a)
        assert not server.exists()
    finally:
        stop_stack(stack)


def test_a_route_s_text_is_made_without_any_file(tmp_path: Path) -> None:
    """route.py is pure text: the paths it names (flag, activity, users file) are only written into the route."""
    from orchestrator.adapters.nginx.route import route_text

    nowhere = tmp_path / "nowhere"
    common = {"host_name": "acme-api-pr-3.previews.example", "activity": nowhere / "activity.log",
              "users_file": nowhere / "users", "public_host": "previews.example", "listen_port": 8080}
    path = route_text(Routing(protection="basic", sleep=True), "acme-api", 3, "acme-api-3", 8003, "10.0.0.5",
                      flag=nowhere / "open" / "acme-api-pr-3", wake_key="the-wake-key", **common)
    assert "location /acme-api/pr-3/ {" in path and "proxy_pass http://10.0.0.5:8003/;" in path
    assert f"if (!-f {nowhere}/open/acme-api-pr-3)" in path and f"auth_basic_user_file {nowhere}/users;" in path
    assert f"access_log {nowhere}/activity.log combined if=$upstream_addr;" in path
    assert "proxy_set_header X-Preview-Wake-Key the-wake-key;" in path
    host = route_text(Routing(mode="host", domain="previews.example"), "acme-api", 3, "acme-api-3", 8003,
                      "127.0.0.1", flag=None, wake_key=None, **common)
    assert "server_name acme-api-pr-3.previews.example;" in host and "listen 8080;" in host
    assert "if (!-f" not in host and "preview-wake" not in host  # no flag, no sleep
    assert not nowhere.exists()
