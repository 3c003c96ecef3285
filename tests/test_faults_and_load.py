"""Faults and load with real parts: the service killed mid-deploy and mid-update, the code host failing for
a while, git unable to clone, and 50 pull requests at once."""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator.adapters.leftovers import marked_processes
from orchestrator.common.host_env import HostEnv
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import ServiceProcess, wait_until
from tests.support.nginx import Nginx
from tests.support.payloads import pr_payload, webhook_headers
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack
from tests.support.test_engine import start_engine, stop_engine

pytestmark = [pytest.mark.docker, pytest.mark.live]


def slow_reload(nginx: Nginx) -> str:
    """The reload waits 1.5 s first, which opens a window to kill the service in the middle of a cleanup."""
    return shlex.join(["sh", "-c", f"sleep 1.5 && exec {nginx.reload_command}"])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("faults"), reload_command=slow_reload,
                          MAX_CONCURRENT_PREVIEWS="60", MAX_CONCURRENT_BUILDS="4")
    yield running
    stop_stack(running)


def restart(stack: Stack) -> None:
    """SIGKILL the service and start it again on the same port with the same settings."""
    stack.service.kill9()
    stack.service = ServiceProcess(stack.root, port=stack.service.port, **stack.service.extra_env).start()
    json.loads((stack.root / "state" / "deployments.json").read_text())  # the store is still valid JSON


@pytest.mark.parametrize("moment", ["deploy", "update"])
def test_sigkill_in_the_middle_of_a_flow_ends_running_and_cleans_up(stack: Stack, moment: str) -> None:
    pr = 60 if moment == "deploy" else 61
    repo = make_pr_repo(stack.root / "repos", "python", f"kill/{moment}",
                        config=config_for("python", build_commands=["sleep 3"]))
    stack.send("opened", pr, repo, repo.sha_a)
    if moment == "update":
        stack.wait_for(pr, "running", repo.sha_a)
        stack.send("synchronize", pr, repo, repo.sha_b)
    log = stack.root / "deployments" / SLUG / f"pr-{pr}.log"
    runs = 1 if moment == "deploy" else 2
    wait_until(lambda: log.exists() and log.read_text().count("$ sh -c sleep 3") == runs, timeout=60,
               message="inside build_commands")
    restart(stack)
    sha = repo.sha_a if moment == "deploy" else repo.sha_b
    stack.wait_for(pr, "running", sha)  # the acknowledged event ran again after the restart
    stack.wait_page(pr, f"python says: commit {'A' if moment == 'deploy' else 'B'}\n")
    stack.close(pr, repo, sha)


def test_code_host_failing_for_a_while_does_not_fail_the_deploy(stack: Stack) -> None:
    pr = 62
    repo = make_pr_repo(stack.root / "repos", "python", "flaky/host", config=config_for("python"))
    before = len(stack.codehost.calls)
    stack.codehost.fail_next(2, 500)
    stack.codehost.fail_next(1, 429, {"Retry-After": "1"})
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    stack.wait_comment(pr, "Preview ready")
    assert [c.status for c in stack.codehost.calls[before:before + 4]] == [500, 500, 429, 201]
    stack.close(pr, repo, repo.sha_a)


def test_an_unreachable_clone_url_fails_cleanly(stack: Stack) -> None:
    pr = 63
    repo = make_pr_repo(stack.root / "repos", "python", "gone/repo", config=config_for("python"))
    body = pr_payload("opened", number=pr, sha=repo.sha_a, clone_url=str(stack.root / "no-such.git"), ref=repo.branch)
    response = web.post(f"{stack.service.url}/webhook/codehost", content=body, headers=webhook_headers(body))
    assert response.status_code == 200
    assert stack.wait_for(pr, "failed")["error"] == "Git clone or checkout failed"
    stack.wait_comment(pr, "Git clone or checkout failed")
    stack.close(pr, repo, repo.sha_a)


def test_fifty_pull_requests_at_once_and_two_events_ten_ms_apart(stack: Stack) -> None:
    # No preview-config.yml: each deploy allocates ports, clones and fails fast, which is what is measured.
    repo = make_pr_repo(stack.root / "repos", "python", "load/many", drop=("preview-config.yml",))
    numbers = list(range(100, 150))
    errors: list[str] = []

    def send(pr: int) -> None:
        body = pr_payload("opened", number=pr, sha=repo.sha_a, clone_url=repo.clone_url, ref=repo.branch)
        response = web.post(f"{stack.service.url}/webhook/codehost", content=body,
                            headers=webhook_headers(body, delivery=f"load-{pr}"), timeout=30)
        if response.status_code != 200:
            errors.append(response.text)

    threads = [threading.Thread(target=send, args=(pr,)) for pr in numbers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Two events for one pull request 10 ms apart: both run, in order.
    stack.send("opened", 150, repo, repo.sha_a)
    threading.Event().wait(0.01)
    stack.send("synchronize", 150, repo, repo.sha_b)
    wait_until(lambda: sum(1 for r in stack.records().values() if r["status"] == "failed") == 51, timeout=300,
               message="51 deploys finished")
    records = [r for r in stack.records().values() if r["prNumber"] >= 100]
    assert len({(r["exposedAppPort"]) for r in records}) == 51
    assert len({(r["exposedDbPort"]) for r in records}) == 51
    assert not {r["exposedAppPort"] for r in records} & {r["exposedDbPort"] for r in records}
    wait_until(lambda: stack.records()[f"{SLUG}-150"]["commitSha"] == repo.sha_b, timeout=60, message="sync ran")
    inbox = sqlite3.connect(stack.root / "state" / "inbox.sqlite3")

    def inbox_rows() -> list[tuple[str, str]]:
        return inbox.execute("SELECT delivery_id, status FROM events WHERE delivery_id LIKE 'load-%'").fetchall()

    # The record says failed a moment before the lane marks its inbox row done: wait for the rows to settle.
    wait_until(lambda: not {status for _, status in inbox_rows()} & {"pending", "running"}, timeout=60,
               message="every inbox row settled")
    rows = inbox_rows()
    assert sorted(d for d, _ in rows) == sorted(f"load-{pr}" for pr in numbers)  # each stored once
    assert {status for _, status in rows} == {"failed"}  # and each processed, once
    wait_until(lambda: all(stack.codehost.comments_on("Codertocat", "Hello-World", pr) for pr in numbers),
               timeout=60, message="every pull request commented")
    for pr in numbers:
        assert len(stack.codehost.comments_on("Codertocat", "Hello-World", pr)) == 1
    for pr in [*numbers, 150]:
        stack.send("closed", pr, repo, repo.sha_b)
    wait_until(lambda: not any(r["prNumber"] >= 100 for r in stack.records().values()), timeout=300,
               message="all cleaned")
    for pr in (100, 125, 150):
        assert_fully_removed(stack, pr)


def test_sigkill_in_the_middle_of_a_cleanup_finishes_after_restart(stack: Stack) -> None:
    pr = 64
    repo = make_pr_repo(stack.root / "repos", "python", "kill/cleanup", config=config_for("python"))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    stack.send("closed", pr, repo, repo.sha_a)
    work = stack.root / "deployments" / SLUG / f"pr-{pr}"
    # The work directory goes before the route, and the route's reload takes 1.5 s: kill in between.
    wait_until(lambda: not work.exists(), timeout=60, message="cleanup under way")
    assert f"{SLUG}-{pr}" in stack.records()
    restart(stack)
    stack.wait_gone(pr)
    assert_fully_removed(stack, pr)


def test_nginx_not_running_fails_the_deploy_and_leaves_no_route(stack: Stack) -> None:
    pr = 65
    repo = make_pr_repo(stack.root / "repos", "python", "nginx/down", config=config_for("python"))
    stack.nginx.stop()
    wait_until(lambda: not (stack.nginx.dir / "nginx.pid").exists(), timeout=10, message="nginx stopped")
    try:
        stack.send("opened", pr, repo, repo.sha_a)
        assert stack.wait_for(pr, "failed")["error"] == "Nginx reload failed"
        assert not (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").exists()
        assert web.get(f"{stack.service.url}/health").status_code == 200
    finally:
        stack.nginx.start()
    stack.close(pr, repo, repo.sha_a)


def test_read_only_deployments_dir_fails_cleanly(stack: Stack) -> None:
    pr = 66
    repo = make_pr_repo(stack.root / "repos", "python", "disk/ro", config=config_for("python"))
    slug_dir = stack.root / "deployments" / SLUG
    slug_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(slug_dir)], check=True, timeout=30)
    try:
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "failed")
        assert record["error"] in ("Git clone or checkout failed",
                                   "Work directory cannot be written: Read-only file system")
        stack.wait_comment(pr, "Preview failed")
    finally:
        subprocess.run(["umount", str(slug_dir)], check=True, timeout=30)
    stack.close(pr, repo, repo.sha_a)




def test_docker_engine_stopped_mid_deploy(stack: Stack) -> None:
    pr = 67
    repo = make_pr_repo(stack.root / "repos", "python", "docker/down",
                        config=config_for("python"), files={"Dockerfile": (
                            "FROM po-standin/python:test\nRUN sleep 20\nWORKDIR /app\nCOPY . .\n"
                            "USER 10001:10001\nCMD [\"python3\", \"app.py\"]\n")})
    stack.send("opened", pr, repo, repo.sha_a)
    log = stack.root / "deployments" / SLUG / f"pr-{pr}.log"
    wait_until(lambda: log.exists() and "compose.preview.yml build" in log.read_text(), timeout=120,
               message="compose build running")
    time.sleep(2)
    stop_engine()  # the suite's own engine (its pidfile): the machine's default engine is never stopped
    wait_until(lambda: subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0,
               timeout=60, message="engine down")
    try:
        assert stack.wait_for(pr, "failed")["error"] in ("Docker build failed", "Containers failed to start")
        assert web.get(f"{stack.service.url}/health").status_code == 200
    finally:
        start_engine()
    stack.close(pr, repo, repo.sha_a)


HOSTILE_COMPOSE = """
services:
  app:
    build: .
    ports: ["0.0.0.0:80:8000"]
    environment:
      LEAK: "${CODEHOST_TOKEN}"
      SECRET: "${CODEHOST_WEBHOOK_SECRET:-none}"
  db:
    image: po-standin/postgres:test
    environment: {POSTGRES_USER: u, POSTGRES_PASSWORD: p, POSTGRES_DB: d}
    healthcheck: {test: ["CMD", "pg_isready", "-U", "u", "-h", "127.0.0.1"], interval: 2s, retries: 30}
"""
HOSTILE_DOTENV = "COMPOSE_PROJECT_NAME=someone-else\nCOMPOSE_FILE=/etc/hostname\nDOCKER_HOST=tcp://127.0.0.1:1\n"
PLAIN_DOCKERFILE = ("FROM po-standin/python:test\nWORKDIR /app\nCOPY . .\nUSER 10001:10001\n"
                    "CMD [\"python3\", \"app.py\"]\n")


def test_hostile_repository_compose_and_dotenv_cannot_reach_secrets_or_redirect(stack: Stack) -> None:
    pr = 68
    repo = make_pr_repo(stack.root / "repos", "python", "hostile/files", config=config_for("python"),
                        files={"compose.preview.yml": HOSTILE_COMPOSE, ".env": HOSTILE_DOTENV,
                               "Dockerfile": PLAIN_DOCKERFILE})
    stack.send("opened", pr, repo, repo.sha_a)
    record = stack.wait_for(pr, "running", repo.sha_a)
    stack.wait_page(pr, "python says: commit A\n")
    assert stack.page(pr, "env/LEAK").text == ""  # ${CODEHOST_TOKEN} expanded to nothing
    assert stack.page(pr, "env/SECRET").text == "none"
    project = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={SLUG}-{pr}"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert len(project) == 2  # our project name, not the .env's
    ports = subprocess.run(["docker", "port", f"{SLUG}-pr-{pr}-app"], capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert ports.strip() == f"8000/tcp -> 127.0.0.1:{record['exposedAppPort']}"  # 0.0.0.0:80 was replaced
    stack.close(pr, repo, repo.sha_a)


def test_previews_cannot_reach_each_others_database(stack: Stack) -> None:
    first, second = 69, 70
    repos = {pr: make_pr_repo(stack.root / "repos", "python", f"isolation/{pr}", config=config_for("python"))
             for pr in (first, second)}
    for pr, repo in repos.items():
        stack.send("opened", pr, repo, repo.sha_a)
    for pr in repos:
        stack.wait_for(pr, "running")
        stack.wait_page(pr, "python says: commit A\n")
    other_db = f"{SLUG}-pr-{second}-db"
    address = subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                              other_db], capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert stack.page(first, "tcp/db/5432").text == "open"  # its own database
    assert stack.page(first, f"tcp/{other_db}/5432").text.startswith("error")  # not resolvable
    assert stack.page(first, f"tcp/{address}/5432").text.startswith("error")  # not routable
    for pr, repo in repos.items():
        stack.send("closed", pr, repo, repo.sha_a)
    for pr in repos:
        stack.wait_gone(pr)
        assert_fully_removed(stack, pr)


def test_a_restart_stops_what_the_killed_service_left_running(stack: Stack) -> None:
    """SIGKILL while a build command runs: its container and the docker client keep running. The next start
    stops both before the event runs again; closing the pull request then cancels the re-run at once."""
    pr = 71
    repo = make_pr_repo(stack.root / "repos", "python", "kill/leftovers",
                        config=config_for("python", build_commands=["sleep 361"]))
    stack.send("opened", pr, repo, repo.sha_a)
    log = stack.root / "deployments" / SLUG / f"pr-{pr}.log"
    wait_until(lambda: log.exists() and "$ sh -c sleep 361" in log.read_text(), timeout=60, message="building")
    name = f"po-build-{SLUG}-{pr}-0"
    wait_until(lambda: docker_ids(name), timeout=30, message="build container running")
    [before] = docker_ids(name)
    marker = HostEnv.for_state_dir(stack.root / "state").marker
    clients = marked_processes(marker)
    assert clients  # the docker client of the build command
    restart(stack)
    assert not set(clients) & set(marked_processes(marker))
    assert before not in docker_ids(name)
    wait_until(lambda: log.read_text().count("$ sh -c sleep 361") == 2, timeout=60, message="re-run")
    started = time.monotonic()
    stack.close(pr, repo, repo.sha_a)
    assert time.monotonic() - started < 30  # not after the 600 s build command timeout
    assert docker_ids(name) == []


def test_rotating_the_webhook_secret_keeps_every_preview_s_database_password(stack: Stack) -> None:
    pr = 72
    repo = make_pr_repo(stack.root / "repos", "python", "rotate/secret", config=config_for("python"))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    before = app_env(f"{SLUG}-pr-{pr}-app")["DATABASE_URL"]
    rotated = "a-new-webhook-secret-93b1"
    stack.service.kill9()
    stack.service = ServiceProcess(stack.root, port=stack.service.port,
                                   **{**stack.service.extra_env, "CODEHOST_WEBHOOK_SECRET": rotated}).start()
    try:
        body = pr_payload("synchronize", number=pr, sha=repo.sha_b, clone_url=repo.clone_url, ref=repo.branch)
        response = web.post(f"{stack.service.url}/webhook/codehost", content=body,
                            headers=webhook_headers(body, secret=rotated), timeout=10)
        assert response.status_code == 200
        stack.wait_for(pr, "running", repo.sha_b)
        assert app_env(f"{SLUG}-pr-{pr}-app")["DATABASE_URL"] == before
        assert stack.page(pr, "db").text == "db reachable"
    finally:
        stack.service.kill9()
        extra = {k: v for k, v in stack.service.extra_env.items() if k != "CODEHOST_WEBHOOK_SECRET"}
        stack.service = ServiceProcess(stack.root, port=stack.service.port, **extra).start()
    stack.close(pr, repo, repo.sha_b)


def docker_ids(name: str) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--no-trunc", "--filter", f"name=^{name}$"], capture_output=True,
                          text=True, timeout=30, check=True).stdout.split()


def app_env(container: str) -> dict[str, str]:
    output = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Env}}", container], capture_output=True,
                            text=True, timeout=30, check=True).stdout
    return dict(item.split("=", 1) for item in json.loads(output))
