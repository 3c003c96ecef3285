"""Who may open a preview (PREVIEW_PROTECTION, docs/security.md): HTTP basic authentication and signed, expiring
links, with a real nginx (workers as its default unprivileged user, as on a host) and the real service; end to
end with Docker, the login app behind each."""

from __future__ import annotations

import grp
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from falcon import testing
from pydantic import SecretStr

from orchestrator.adapters.nginx import USERS_FILE, Proxy, ProxyError, Routing
from orchestrator.common.commands import DeploymentLog
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.preview_tokens import check_preview_token, sign_preview_token
from orchestrator.common.secret_files import random_key, read_or_create
from orchestrator.http.app import create_app
from orchestrator.http.resources.preview_access import clean_location
from orchestrator.settings import SettingsError, load_settings
from tests.conftest import SettingsFactory
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.handlers import RecordingHandler
from tests.support.live import ServiceProcess
from tests.support.nginx import Nginx, subject_of
from tests.support.records import sample_record, track
from tests.support.stack import SLUG, start_stack, stop_stack
from tests.test_routing import DOMAIN, LOGIN_CONFIG, comment_link, log_in_through, loopback_client, serve_app

PASSWORD = "correct horse battery"  # noqa: S105 - a test credential


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory nginx's workers (nobody) can reach, unlike pytest's private temporary directories — as
    /etc/nginx/preview-locations is on a host."""
    directory = Path(tempfile.mkdtemp(prefix="po-protection-", dir="/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def nginx(open_dir: Path) -> Iterator[Nginx]:
    server = Nginx(open_dir / "nginx", open_dir / "routes").start()
    yield server
    server.stop()


def make_proxy(nginx: Nginx, routing: Routing) -> Proxy:
    return Proxy(nginx.routes, nginx.test_command, nginx.reload_command, HostEnv.for_state_dir(nginx.routes),
                 public_host=f"127.0.0.1:{nginx.port}", listen_port=nginx.port, routing=routing)


# Settings -----------------------------------------------------------------------------------------------------


def settings_of(**values: object):  # noqa: ANN201
    return load_settings(_env_file=None, codehost_webhook_secret="s" * 20, **values)


@pytest.mark.parametrize(("values", "message"), [
    ({"preview_protection": "basic"}, "PREVIEW_PROTECTION=basic needs exactly one of"),
    ({"preview_protection": "basic", "preview_protection_users": "alice:pw",
      "preview_protection_users_file": "/etc/hostname"}, "PREVIEW_PROTECTION=basic needs exactly one of"),
    ({"preview_protection": "basic", "preview_protection_users": "alice:hunter22,bob"},
     "PREVIEW_PROTECTION_USERS is not valid: entry 2 is not user:password"),
    ({"preview_protection": "basic", "preview_protection_users": "al ice:hunter22"},
     "PREVIEW_PROTECTION_USERS is not valid: entry 1"),
    ({"preview_protection": "basic", "preview_protection_users": "alice:hunter22,alice:hunter23"},
     "PREVIEW_PROTECTION_USERS is not valid: a user is listed twice"),
    ({"preview_protection": "basic", "preview_protection_users_file": "/nonexistent/htpasswd"},
     "PREVIEW_PROTECTION_USERS_FILE names no file"),
    ({"preview_protection": "basic", "preview_protection_users_file": "/etc/pass wd"},
     "PREVIEW_PROTECTION_USERS_FILE must be an absolute path"),
    ({"preview_protection_users": "alice:hunter22"}, "PREVIEW_PROTECTION_USERS and PREVIEW_PROTECTION_USERS_FILE are "
                                                     "for PREVIEW_PROTECTION=basic"),
])
def test_protection_settings_that_cannot_work_are_refused_without_echoing_them(values: dict, message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        settings_of(**values)
    assert any(line.startswith(message) for line in refused.value.lines), refused.value.lines
    assert "hunter2" not in str(refused.value)


def test_modes_are_accepted_once_configured() -> None:
    assert settings_of(preview_protection="basic", preview_protection_users="alice:pw").preview_protection == "basic"
    assert settings_of(preview_protection="token").preview_protection == "token"
    assert settings_of(preview_routing="host", preview_domain=DOMAIN).preview_routing == "host"


def test_tokens_are_bound_to_their_repository_s_preview_and_expire() -> None:
    key, now = random_key(), time.time()
    three = subject_of("acme-api-3")
    token = sign_preview_token(key, three, int(now) + 60)
    assert check_preview_token(key, three, token, now)
    assert not check_preview_token(key, subject_of("acme-api-4"), token, now)  # another preview
    # another repository whose name gives the same deployment id (acme/api and acme/_api share the slug acme-api)
    assert not check_preview_token(key, subject_of("acme-api-3", "github/acme/_api"), token, now)
    assert not check_preview_token(key, subject_of("acme-api-3", "local/acme/api"), token, now)  # another host
    assert not check_preview_token(random_key(), three, token, now)  # another key
    assert not check_preview_token(key, three, token, now + 61)  # expired
    expires, signature = token.split(".")
    assert not check_preview_token(key, three, f"{int(expires) + 3600}.{signature}", now)  # prolonged
    for bad in ("", ".", "abc", f"{expires}.", f"{expires}.{signature}x", f"{expires}.{signature[:-1]}+"):
        assert not check_preview_token(key, three, bad, now)


# Basic authentication with a real nginx --------------------------------------------------------------------------


def test_basic_protection_asks_every_request_for_credentials(nginx: Nginx, tmp_path: Path) -> None:
    proxy = make_proxy(nginx, Routing(protection="basic", users=SecretStr(f"alice:{PASSWORD},bob:second")))
    log = DeploymentLog(tmp_path / "deploy.log")
    with serve_app() as port:
        proxy.install("acme-api", 3, "acme-api-3", port, log, subject=subject_of("acme-api-3"))
        proxy.wait_served("acme-api", 3, "acme-api-3", log, FlowControl(60))  # nginx's 401 is the route's
        url = f"{nginx.url}/acme-api/pr-3/x"
        refused = web.get(url, timeout=10)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == 'Basic realm="Preview acme-api-3"'
        assert refused.headers["x-preview-deployment"] == "acme-api-3"
        assert web.get(url, auth=("alice", "wrong"), timeout=10).status_code == 401
        assert web.get(url, auth=("mallory", PASSWORD), timeout=10).status_code == 401
        page = web.get(url, auth=("alice", PASSWORD), timeout=10)
        assert page.status_code == 200 and "path=/x" in page.text
        assert web.get(url, auth=("bob", "second"), timeout=10).status_code == 200
    users = nginx.routes / USERS_FILE
    text = users.read_text()
    assert re.fullmatch(r"alice:\$6\$[^:\n]+\nbob:\$6\$[^:\n]+\n", text), text  # SHA-512 crypt, never the password
    status = users.stat()
    assert stat.S_IMODE(status.st_mode) == 0o640  # readable by nginx's workers' group, no one else
    assert status.st_gid == grp.getgrnam("nogroup").gr_gid and status.st_uid == os.geteuid()
    assert PASSWORD not in log.path.read_text() and "second" not in log.path.read_text()
    assert "nginx serves the route (401" in log.path.read_text()


def test_an_operators_htpasswd_file_is_used_as_is(nginx: Nginx, open_dir: Path) -> None:
    hashed = subprocess.run(["openssl", "passwd", "-apr1", "-stdin"], input="theirs\n", capture_output=True,
                            text=True, check=True, timeout=30).stdout.strip()
    users_file = open_dir / "operator.htpasswd"
    users_file.write_text(f"carol:{hashed}\n")
    users_file.chmod(0o644)
    proxy = make_proxy(nginx, Routing(protection="basic", users_file=users_file))
    with serve_app() as port:
        proxy.install("acme-api", 3, "acme-api-3", port, None, subject=subject_of("acme-api-3"))
        proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60))
        assert web.get(f"{nginx.url}/acme-api/pr-3/", timeout=10).status_code == 401
        assert web.get(f"{nginx.url}/acme-api/pr-3/", auth=("carol", "theirs"), timeout=10).status_code == 200
    assert users_file.read_text() == f"carol:{hashed}\n"  # untouched
    assert not (nginx.routes / USERS_FILE).exists()


def test_a_users_file_nginx_cannot_read_fails_the_route_probe(tmp_path: Path) -> None:
    # pytest's temporary directory is private to root: nginx's workers cannot open a users file there.
    server = Nginx(tmp_path / "nginx", tmp_path / "routes").start()
    try:
        proxy = make_proxy(server, Routing(protection="basic", users=SecretStr("alice:pw")))
        with serve_app() as port:
            proxy.install("acme-api", 3, "acme-api-3", port, None, subject=subject_of("acme-api-3"))
            with pytest.raises(ProxyError, match="answered 500 where the protection should answer 401"):
                proxy.wait_served("acme-api", 3, "acme-api-3", None, FlowControl(60), timeout=2)
    finally:
        server.stop()


# Signed links with a real nginx and the real service -------------------------------------------------------------


def test_the_access_endpoints_answer_only_in_token_mode(make_settings: SettingsFactory, handler: RecordingHandler,
                                                        tmp_path: Path) -> None:
    off = testing.TestClient(create_app(make_settings(), handler))
    assert off.simulate_get("/api/preview-access/acme-api-3").status_code == 404
    on = testing.TestClient(create_app(make_settings(preview_protection="token"), handler))
    assert on.simulate_get("/api/preview-access/acme-api-3").status_code == 401
    assert on.simulate_get("/api/preview-access/ACME..-3").status_code == 400
    assert on.simulate_get("/api/preview-access/acme-api-3/token",
                           headers={"X-Preview-Token": "1.abc"}).status_code == 401
    key = read_or_create(tmp_path / "state" / "preview-token.key", random_key)  # the service's, made on need
    token = sign_preview_token(key, subject_of("acme-api-3"), int(time.time()) + 60)
    headers = {"X-Preview-Token": token, "X-Original-URI": "/acme-api/pr-3/"}
    # no record of the preview: its token opens nothing
    assert on.simulate_get("/api/preview-access/acme-api-3/token", headers=headers).status_code == 401
    assert on.simulate_get("/api/preview-access/acme-api-3", cookies={"preview_access": token}).status_code == 401
    # the id held by another repository whose name gives the same slug: the first one's link opens nothing
    track(tmp_path / "state" / "deployments.json", sample_record(3, "acme", "_api"))
    assert sample_record(3, "acme", "_api").deploymentId == "acme-api-3"
    assert on.simulate_get("/api/preview-access/acme-api-3/token", headers=headers).status_code == 401
    assert on.simulate_get("/api/preview-access/acme-api-3", cookies={"preview_access": token}).status_code == 401
    track(tmp_path / "state" / "deployments.json", sample_record(3), sample_record(4))
    opened = on.simulate_get("/api/preview-access/acme-api-3/token",
                             headers={"X-Preview-Token": token, "X-Forwarded-Proto": "https",
                                      "X-Original-URI": f"/acme-api/pr-3/a?preview_token={token}&b=1"})
    assert opened.status_code == 302 and opened.headers["location"] == "/acme-api/pr-3/a?b=1"
    cookie = opened.cookies["preview_access"]
    assert cookie.value == token and cookie.path == "/acme-api/pr-3/" and cookie.secure and cookie.http_only
    assert on.simulate_get("/api/preview-access/acme-api-3", cookies={"preview_access": token}).status_code == 204
    assert on.simulate_get("/api/preview-access/acme-api-4", cookies={"preview_access": token}).status_code == 401


def test_redirects_after_the_link_stay_in_the_preview() -> None:
    prefix = "/acme-api/pr-3/"
    assert clean_location("/acme-api/pr-3/?preview_token=x", prefix) == "/acme-api/pr-3/"
    assert clean_location("/acme-api/pr-3/p?a=1&preview_token=x&c=%2F", prefix) == "/acme-api/pr-3/p?a=1&c=%2F"
    assert clean_location("/acme-api/pr-4/?preview_token=x", prefix) == prefix  # not this preview's path
    assert clean_location("//evil.example/?preview_token=x", "/") == "/"
    assert clean_location("", prefix) == prefix


@pytest.mark.live
def test_a_signed_link_opens_its_preview_only_until_it_expires(nginx: Nginx, tmp_path: Path) -> None:
    workdir = tmp_path / "service"
    workdir.mkdir()
    key_path = workdir / "state" / "preview-token.key"
    key = read_or_create(key_path, random_key)
    track(workdir / "state" / "deployments.json", sample_record(3), sample_record(4))
    service = ServiceProcess(workdir, EVENT_HANDLER="tests.support.handlers:from_env",
                             TEST_JOURNAL=str(tmp_path / "journal.jsonl"), PREVIEW_PROTECTION="token").start()
    try:
        proxy = make_proxy(nginx, Routing(protection="token", service=f"127.0.0.1:{service.port}",
                                          token_key=key_path, token_ttl_hours=1))
        with serve_app() as port:
            for pr in (3, 4):
                proxy.install("acme-api", pr, f"acme-api-{pr}", port, None, subject=subject_of(f"acme-api-{pr}"))
                proxy.wait_served("acme-api", pr, f"acme-api-{pr}", None, FlowControl(60))  # 401: protected
            three, four = f"{nginx.url}/acme-api/pr-3/", f"{nginx.url}/acme-api/pr-4/"
            refused = web.get(three, timeout=10)
            assert refused.status_code == 401 and "This preview is protected" in refused.text
            assert refused.headers["x-preview-deployment"] == "acme-api-3"
            link = proxy.reviewer_link(three, subject_of("acme-api-3"))
            token = link.split("preview_token=")[1]
            assert check_preview_token(key, subject_of("acme-api-3"), token, time.time() + 3500)
            # PREVIEW_TOKEN_TTL_HOURS
            assert not check_preview_token(key, subject_of("acme-api-3"), token, time.time() + 3700)
            with web.Client(timeout=10) as reviewer:
                first = reviewer.get(f"{three}items?keep=1&preview_token={token}")
                assert first.status_code == 302 and first.headers["location"] == "/acme-api/pr-3/items?keep=1"
                set_cookie = first.headers["set-cookie"]
                assert "Path=/acme-api/pr-3/" in set_cookie and "HttpOnly" in set_cookie
                assert "SameSite=Lax" in set_cookie and "Secure" not in set_cookie  # plain http here
                page = reviewer.get(httpx.URL(three).join(first.headers["location"]))
                assert page.status_code == 200 and "path=/items?keep=1" in page.text
                assert reviewer.get(three).status_code == 200  # the cookie, on every request of this preview
                assert reviewer.get(four).status_code == 401  # ... and of no other
            # the token or cookie of one preview opens no other
            assert web.get(four, cookies={"preview_access": token}, timeout=10).status_code == 401
            wrong = web.get(f"{four}?preview_token={token}", timeout=10)
            assert wrong.status_code == 401 and "expired or is not for this preview" in wrong.text
            assert "set-cookie" not in wrong.headers
            # an expired token opens nothing, as a link or as a cookie
            expired = sign_preview_token(key, subject_of("acme-api-3"), int(time.time()) - 1)
            assert web.get(f"{three}?preview_token={expired}", timeout=10).status_code == 401
            assert web.get(three, cookies={"preview_access": expired}, timeout=10).status_code == 401
            # health checks probe the app's own port: never asked for anything
            assert web.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        service.stop()
    logged = service.log_path.read_text() + service.out_path.read_text()
    assert "/api/preview-access/acme-api-3/token" in logged  # the service logged the requests ...
    assert token.split(".")[1] not in logged and expired.split(".")[1] not in logged  # ... never a token


# End to end: the login app behind each protection ----------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.live
def test_login_app_behind_basic_authentication(open_dir: Path) -> None:
    stack = start_stack(open_dir, PREVIEW_PROTECTION="basic", PREVIEW_PROTECTION_USERS=f"reviewer:{PASSWORD}")
    try:
        pr = 62
        repo = make_pr_repo(stack.root / "repos", "login", "feature/login-basic", config=LOGIN_CONFIG)
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "running", repo.sha_a)
        link = comment_link(stack, pr)
        assert link == record["url"] == f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        refused = web.get(link, timeout=10)
        assert refused.status_code == 401 and refused.headers["x-preview-deployment"] == f"{SLUG}-{pr}"
        with web.Client(timeout=10, auth=("reviewer", PASSWORD)) as client:
            log_in_through(client, link, f"/{SLUG}/pr-{pr}/")
        assert PASSWORD not in stack.logs(pr)
        assert PASSWORD not in stack.service.log_path.read_text()
        assert PASSWORD not in "".join(p.read_text(errors="replace") for p in stack.root.rglob("*")
                                       if p.is_file() and "repos" not in p.parts)
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_login_app_behind_a_signed_link_on_its_own_host(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, nginx_all_addresses=True, PREVIEW_ROUTING="host", PREVIEW_DOMAIN=DOMAIN,
                        PREVIEW_PROTECTION="token", PREVIEW_TOKEN_TTL_HOURS="2")
    try:
        pr = 63
        repo = make_pr_repo(stack.root / "repos", "login", "feature/login-token", config=LOGIN_CONFIG)
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "running", repo.sha_a)
        clean = f"http://{SLUG}-pr-{pr}.{DOMAIN}:{stack.nginx.port}/"
        assert record["url"] == clean  # the record keeps the clean URL ...
        link = comment_link(stack, pr)
        assert link.startswith(f"{clean}?preview_token=")  # ... the comment's link carries the token
        token = link.split("preview_token=")[1]
        with loopback_client() as stranger:
            refused = stranger.get(clean)
            assert refused.status_code == 401 and "This preview is protected" in refused.text
        with loopback_client() as reviewer:
            opened = reviewer.get(link)
            assert opened.status_code == 302 and opened.headers["location"] == "/"
            assert "preview_access" in reviewer.cookies
            log_in_through(reviewer, clean, "/")
        for text in (stack.logs(pr), stack.service.log_path.read_text(), stack.service.out_path.read_text()):
            assert token.split(".")[1] not in text
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)
