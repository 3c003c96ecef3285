"""A newcomer's first hour, with real parts: the service starts without a webhook secret and keeps the one it
makes, nginx is wired by `setup-nginx` (never over an operator's configuration), `doctor` says what is missing,
`up`/`down` show a first preview without a code host, and the Docker client configuration the operator set up
the way Docker's documentation says (the compose plugin in ~/.docker/cli-plugins or $DOCKER_CONFIG, `docker
login` for a private base image) is what builds use."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import make_pr_repo
from tests.support.live import ServiceProcess, free_port, wait_until
from tests.support.nginx import Nginx
from tests.support.payloads import REPO_ROOT, fixture_bytes, webhook_headers
from tests.support.registry import start_registry, stop_registry
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.support.test_engine import engine_env

pytestmark = [pytest.mark.docker, pytest.mark.live]

HOST_PLUGIN = Path("/usr/local/lib/docker/cli-plugins/docker-compose")


def cli(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd or REPO_ROOT,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), **engine_env(), **env},
                          capture_output=True, text=True, timeout=timeout)


# The webhook secret ---------------------------------------------------------------------------------


def test_a_first_start_without_a_secret_makes_one_keeps_it_and_never_prints_it(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, drop=("CODEHOST_WEBHOOK_SECRET",)).start()
    secret_file = tmp_path / "state" / "webhook-secret"
    try:
        secret = secret_file.read_text()
        assert re.fullmatch(r"[0-9a-f]{64}", secret)
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        ping = fixture_bytes("ping")
        assert web.post(f"{service.url}/webhook/codehost", content=ping, timeout=10,
                        headers=webhook_headers(ping, event="ping", secret=secret)).status_code == 200
    finally:
        service.stop()
    restarted = ServiceProcess(tmp_path, port=service.port, drop=("CODEHOST_WEBHOOK_SECRET",)).start()
    try:
        assert secret_file.read_text() == secret  # reused, not replaced
        assert web.post(f"{restarted.url}/webhook/codehost", content=ping, timeout=10,
                        headers=webhook_headers(ping, event="ping", secret=secret)).status_code == 200
    finally:
        restarted.stop()
    output = service.out_path.read_text() + service.log_path.read_text()
    assert f"webhook secret: kept in {secret_file} (show it: sudo cat {secret_file})" in output
    assert "code host: add a webhook with URL http://localhost/webhook/codehost" in output
    assert secret not in output


# nginx ----------------------------------------------------------------------------------------------

HOST_NGINX = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    include {dir}/sites-enabled/*;
{extra}}}
"""


class ThrowawayNginx:
    """An nginx prefix laid out like Debian's (a main file that includes sites-enabled/*), not running yet."""

    def __init__(self, root: Path, extra: str = "") -> None:
        self.dir = root
        (root / "tmp").mkdir(parents=True)
        (root / "sites-enabled").mkdir()
        self.conf = root / "nginx.conf"
        self.conf.write_text(HOST_NGINX.format(dir=root, extra=extra))
        self.port = free_port()

    def env(self, routes: Path, service_port: int) -> dict[str, str]:
        base = ["nginx", "-c", str(self.conf), "-p", str(self.dir)]
        return {"PROXY_TEST_COMMAND": shlex.join([*base, "-t", "-q"]),
                "PROXY_RELOAD_COMMAND": shlex.join([*base, "-s", "reload"]),
                "PROXY_CONFIG_DIR": str(routes), "PROXY_LISTEN_PORT": str(self.port),
                "PROXY_SITE_FILE": str(self.dir / "sites-enabled" / "preview-orchestrator.conf"),
                "ORCHESTRATOR_PORT": str(service_port)}

    def stop(self) -> None:
        subprocess.run(["nginx", "-c", str(self.conf), "-p", str(self.dir), "-s", "quit"], capture_output=True,
                       timeout=30)


def test_setup_nginx_installs_one_site_and_the_webhook_reaches_the_service_through_it(tmp_path: Path) -> None:
    nginx = ThrowawayNginx(tmp_path / "nginx")
    service = ServiceProcess(tmp_path / "service")
    (tmp_path / "service").mkdir()
    env = {**service.env, **nginx.env(tmp_path / "routes", service.port)}
    try:
        first = cli("setup-nginx", env=env)
        assert first.returncode == 0, first.stderr
        site = tmp_path / "nginx" / "sites-enabled" / "preview-orchestrator.conf"
        assert first.stdout.strip() == f"installed the nginx site {site} (port {nginx.port}); nginx started"
        assert f"include {tmp_path / 'routes'}/*.conf;" in site.read_text()
        # the webhook paths of the code hosts that are on, and only those (Gitea's secret is not set)
        assert re.findall(r"location = (\S+) \{", site.read_text()) == ["/webhook/github", "/webhook/codehost"]
        subprocess.run(shlex.split(env["PROXY_TEST_COMMAND"]), check=True, timeout=30)  # nginx -t passes
        with ServiceProcess(tmp_path / "service", port=service.port, **nginx.env(tmp_path / "routes",
                                                                                   service.port)) as running:
            ping = fixture_bytes("ping")
            through = web.post(f"http://127.0.0.1:{nginx.port}/webhook/codehost", content=ping, timeout=10,
                               headers={**webhook_headers(ping, event="ping"), "Host": "localhost"})
            assert through.status_code == 200 and through.json() == {"status": "ok"}
            # only the webhook is public
            assert web.get(f"http://127.0.0.1:{nginx.port}/api/previews", headers={"Host": "localhost"},
                           timeout=10).status_code == 404
            assert running.process is not None
        again = cli("setup-nginx", env=env)
        assert again.returncode == 0 and "already includes" in again.stdout
    finally:
        nginx.stop()


def test_setup_nginx_leaves_an_operators_configuration_alone(tmp_path: Path) -> None:
    routes = tmp_path / "routes"
    included = ThrowawayNginx(tmp_path / "included", extra=f"    server {{ listen 127.0.0.1:{free_port()}; "
                                                          f"include {routes}/*.conf; }}\n")
    env = {"CODEHOST_WEBHOOK_SECRET": "s", "DEPLOYMENTS_DB": str(tmp_path / "state" / "d.json"),
           **included.env(routes, 3000)}
    theirs = ThrowawayNginx(tmp_path / "theirs")
    try:
        result = cli("setup-nginx", env=env)
        assert result.returncode == 0 and f"nginx already includes {routes}; nothing to do" in result.stdout
        assert list((tmp_path / "included" / "sites-enabled").iterdir()) == []
        site = tmp_path / "theirs" / "sites-enabled" / "preview-orchestrator.conf"
        site.write_text("# the operator's own server\nserver { listen 127.0.0.1:1; }\n")
        result = cli("setup-nginx", env={**env, **theirs.env(routes, 3000)})
    finally:
        included.stop()
        theirs.stop()
    assert result.returncode == 1
    assert f"{site} exists and is not ours; nothing was changed" in result.stderr
    assert f"include {routes}/*.conf;" in result.stderr and "location = /webhook/codehost" in result.stderr
    assert site.read_text() == "# the operator's own server\nserver { listen 127.0.0.1:1; }\n"


# doctor ---------------------------------------------------------------------------------------------


@pytest.fixture
def codehost() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost().start()
    yield fake
    fake.stop()


def doctor_env(tmp_path: Path, nginx: Nginx, codehost: FakeCodeHost, **extra: str) -> dict[str, str]:
    return {"HOME": "/root", "CODEHOST_WEBHOOK_SECRET": "s", "CODEHOST_TOKEN": "t", "ALLOWED_REPOS": "a/b",
            "CODEHOST_API_URL": codehost.url, "DEPLOYMENTS_DB": str(tmp_path / "state" / "deployments.json"),
            "DEPLOYMENTS_DIR": str(tmp_path / "deployments"), "PROXY_CONFIG_DIR": str(nginx.routes),
            "PROXY_TEST_COMMAND": nginx.test_command, "PROXY_RELOAD_COMMAND": nginx.reload_command, **extra}


def test_doctor_on_the_prepared_host(tmp_path: Path, codehost: FakeCodeHost) -> None:
    nginx = Nginx(tmp_path / "nginx", tmp_path / "routes").start()
    try:
        result = cli("doctor", env=doctor_env(tmp_path, nginx, codehost))
    finally:
        nginx.stop()
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    for name in ("Docker engine reachable", "docker compose v2", "git", "nginx installed", "passes",
                 f"a server includes {tmp_path / 'routes'}/*.conf", "state directory writable",
                 "work directory writable", "free ports in both pools", "free disk space", "ALLOWED_REPOS set",
                 "code host API reachable"):
        [line] = [line for line in lines if name in line]
        assert line.startswith("✓"), line
    assert "4999/5000 requests left this hour" in result.stdout
    # this host's Docker has no buildx plugin (Debian ships none), and compose builds with BuildKit all the same
    [buildkit] = [line for line in lines if "BuildKit" in line]
    assert buildkit.startswith("✓ builds use the engine's BuildKit (docker compose build): engine API 1."), buildkit


@pytest.mark.parametrize("breakage", ["engine socket absent", "nginx missing", "work directory read-only"])
def test_doctor_names_what_is_broken_and_fails(tmp_path: Path, codehost: FakeCodeHost, breakage: str) -> None:
    nginx = Nginx(tmp_path / "nginx", tmp_path / "routes").start()
    env = doctor_env(tmp_path, nginx, codehost)
    mounted = None
    if breakage == "engine socket absent":
        env["DOCKER_HOST"] = f"unix://{tmp_path}/no-such-docker.sock"
        expected = "✗ Docker engine reachable"
    elif breakage == "nginx missing":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("docker", "git", "sh"):
            (bin_dir / tool).symlink_to(shutil.which(tool))
        env["PATH"] = str(bin_dir)
        expected = "✗ nginx installed (PROXY_RELOAD_COMMAND): not found — fix: apt-get install nginx-light"
    else:
        mounted = tmp_path / "deployments"
        mounted.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mounted)], check=True, timeout=30)
        expected = f"✗ work directory writable: {mounted}: Read-only file system — fix: make {mounted} writable"
    try:
        result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "doctor"], cwd=REPO_ROOT,
                                env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), **engine_env(),
                                     **env},
                                capture_output=True, text=True, timeout=120)
    finally:
        nginx.stop()
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], check=True, timeout=30)
    assert result.returncode == 1, result.stdout
    assert any(line.startswith(expected) for line in result.stdout.splitlines()), result.stdout


def test_the_service_refuses_to_start_on_a_host_that_fails_a_hard_check(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no-such-docker.sock")
    with pytest.raises(RuntimeError, match="service exited early"):
        service.start(timeout=60)
    assert "preview-orchestrator: ✗ Docker engine reachable" in service.log_path.read_text()


# A first preview without a code host ------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("first-hour"))
    yield running
    stop_stack(running)


def test_up_and_down_of_the_readme_example_through_nginx(stack: Stack, tmp_path: Path) -> None:
    env = {"PREVIEW_ORCHESTRATOR_URL": stack.service.url, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}
    up = cli("up", "examples/hello", "--follow", env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    lines = up.stdout.splitlines()
    assert re.fullmatch(r"local-hello-1: deploying examples/hello \(snapshot [0-9a-f]{7}\)", lines[0])
    assert "clone --no-checkout" in up.stdout and "health probe" in up.stdout  # the build, live
    assert lines[-1] == f"local-hello-1: running at {stack.nginx.url}/local-hello/pr-1/"
    wait_until(lambda: web.get(f"{stack.nginx.url}/local-hello/pr-1/", timeout=10).text
               == "Hello from a preview! Database: reachable.\n", timeout=15, message="page")
    record = stack.records()["local-hello-1"]
    assert record["source"] == "local" and record["commentId"] is None and record["codehostDeploymentId"] is None
    assert not [call for call in stack.codehost.calls if call.path.startswith("/repos/local/")]
    listed = cli("list", env=env)
    assert "local-hello-1" in listed.stdout and "running" in listed.stdout
    # a second `up` of a changed directory updates the same preview
    work = tmp_path / "hello"
    shutil.copytree(REPO_ROOT / "examples" / "hello", work)
    (work / "app.py").write_text((work / "app.py").read_text().replace("Hello from", "Hi again from"))
    again = cli("up", str(work), "--name", "hello", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == f"local-hello-1: running at {stack.nginx.url}/local-hello/pr-1/"
    wait_until(lambda: web.get(f"{stack.nginx.url}/local-hello/pr-1/", timeout=10).text.startswith("Hi again"),
               timeout=15, message="updated page")
    down = cli("down", "local-hello-1", env=env)
    assert down.returncode == 0 and down.stdout.strip() == "Preview local-hello-1 cleaned up"
    assert "local-hello-1" not in stack.records()
    assert web.get(f"{stack.nginx.url}/local-hello/pr-1/", timeout=10).status_code == 404


def test_local_previews_count_against_the_limit_and_refuse_bad_requests(stack: Stack, tmp_path: Path) -> None:
    url = f"{stack.service.url}/api/previews"
    bad = web.post(url, json={"path": "relative", "name": "x", "branch": "main", "sha": "a" * 40}, timeout=10)
    assert bad.status_code == 400 and "path" in bad.json()["error"]
    missing = web.post(url, json={"path": str(tmp_path), "name": "x", "branch": "main", "sha": "a" * 40},
                       timeout=10)
    assert missing.status_code == 400 and "is not a git repository" in missing.json()["error"]


# The operator's Docker client configuration -------------------------------------------------------


WRAPPER = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/used.log"
exec {plugin} "$@"
"""
OWN_DOCKERFILE = ("FROM po-standin/python:test\nWORKDIR /app\nCOPY . .\nUSER 10001:10001\n"
                  "ENTRYPOINT [\"python3\"]\nCMD [\"app.py\"]\n")


@pytest.mark.parametrize("where", ["home", "docker_config"])
def test_a_compose_plugin_installed_per_user_is_the_one_used(tmp_path: Path, where: str) -> None:
    """Docker's manual install puts compose in ~/.docker/cli-plugins (or $DOCKER_CONFIG/cli-plugins); the
    service keeps HOME and DOCKER_CONFIG for docker and compose, so that plugin builds and runs the preview.
    The plugin here wraps the host's and notes each call."""
    config_dir = tmp_path / ".docker" if where == "home" else tmp_path / "docker-config"
    plugin = config_dir / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir(parents=True)
    plugin.write_text(WRAPPER.format(plugin=HOST_PLUGIN))
    plugin.chmod(0o755)
    extra = {"DOCKER_CONFIG": str(config_dir)} if where == "docker_config" else {}
    stack = start_stack(tmp_path, **extra)
    try:
        repo = make_pr_repo(tmp_path / "repos", "python", f"plugin/{where}", config=config_for("python"))
        stack.send("opened", 90, repo, repo.sha_a)
        stack.wait_for(90, "running", repo.sha_a)
        used = (plugin.parent / "used.log").read_text()
        # run directly (runtime/compose_program.py), not through the docker CLI, which would pass `compose` first
        calls = [line for line in used.splitlines() if line.startswith(f"--project-name {SLUG}-90 ")]
        assert any(" build" in line for line in calls) and any(" up --detach" in line for line in calls), used
        stack.close(90, repo, repo.sha_a)
    finally:
        stop_stack(stack)


def test_a_repository_dockerfile_keeps_its_entrypoint_and_cmd_after_startup_commands(stack: Stack) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", "own/entrypoint", files={"Dockerfile": OWN_DOCKERFILE},
                        config=config_for("python", app_entrypoint="this-is-not-a-command",
                                          startup_commands=["export STARTUP_RAN=yes", "test -f app.py"]))
    stack.send("opened", 91, repo, repo.sha_a)
    stack.wait_for(91, "running", repo.sha_a)
    stack.wait_page(91, "python says: commit A\n")
    assert stack.page(91, "env/STARTUP_RAN").text == "yes"  # the startup commands ran first, in its process
    stack.close(91, repo, repo.sha_a)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1 with htpasswd authentication; yields its address."""
    address = f"127.0.0.1:{free_port()}"
    process = start_registry(tmp_path / "registry", address, ("operator", "registry-pass-41"))
    yield address
    stop_registry(process)


def test_a_private_base_image_builds_with_the_operators_docker_login(tmp_path: Path, registry: str) -> None:
    image = f"{registry}/team/python-base:1"
    pusher = {"PATH": os.environ["PATH"], "DOCKER_CONFIG": str(tmp_path / "pusher"), **engine_env()}
    subprocess.run(["docker", "tag", "po-standin/python:test", image], check=True, timeout=60)
    subprocess.run(["docker", "login", "-u", "operator", "--password-stdin", registry], input="registry-pass-41",
                   env=pusher, check=True, capture_output=True, text=True, timeout=60)
    subprocess.run(["docker", "push", image], env=pusher, check=True, capture_output=True, timeout=300)
    subprocess.run(["docker", "rmi", image], check=True, capture_output=True, timeout=60)  # the build must pull
    home = tmp_path / "operator"
    home.mkdir()
    # the operator logs in once, as Docker's documentation says; the service runs with that HOME
    subprocess.run(["docker", "login", "-u", "operator", "--password-stdin", registry], input="registry-pass-41",
                   env={"PATH": os.environ["PATH"], "HOME": str(home), **engine_env()}, check=True, capture_output=True,
                   text=True,
                   timeout=60)
    (tmp_path / "stack").mkdir()
    stack = start_stack(tmp_path / "stack", HOME=str(home))
    try:
        dockerfile = (f"FROM {image}\nWORKDIR /app\nCOPY . .\nRUN env > /build-env.txt\nUSER 10001:10001\n"
                      "CMD [\"python3\", \"app.py\"]\n")
        repo = make_pr_repo(stack.root / "repos", "python", "private/base", config=config_for("python"),
                            files={"Dockerfile": dockerfile})
        stack.send("opened", 92, repo, repo.sha_a)
        stack.wait_for(92, "running", repo.sha_a)
        stack.wait_page(92, "python says: commit A\n")
        container = f"{SLUG}-pr-92-app"
        build_env = subprocess.run(["docker", "exec", container, "cat", "/build-env.txt"], capture_output=True,
                                   text=True, timeout=30, check=True).stdout
        run_env = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .Config.Env}}", container],
                                            capture_output=True, text=True, timeout=30, check=True).stdout)
        for secret in ("test-webhook-secret-5f1c", "live-test-token-8d2e", "registry-pass-41"):
            assert secret not in build_env and secret not in " ".join(run_env)
        stack.close(92, repo, repo.sha_a)
    finally:
        stop_stack(stack)
        subprocess.run(["docker", "rmi", image], capture_output=True, timeout=60)
