"""End to end with real parts: signed webhooks into the real service (uvicorn), git clones of local
repositories, the Docker engine with compose v2 and stand-in images, a real nginx, and the fake code host."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from orchestrator.common.labels import DEPLOYMENT_LABEL
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("e2e"))
    yield running
    stop_stack(running)


@pytest.mark.parametrize(("framework", "database"), [
    ("nestjs", "postgres"), ("go", "mysql"), ("laravel", "mongodb"), ("rust", "postgres"), ("python", "mysql"),
])
def test_preview_lifecycle(stack: Stack, framework: str, database: str) -> None:
    pr = 10 + ["nestjs", "go", "laravel", "rust", "python"].index(framework)
    repo = make_pr_repo(stack.root / "repos", framework, f"feature/{framework}",
                        config=config_for(framework, database))

    stack.send("opened", pr, repo, repo.sha_a)
    assert stack.wait_for(pr, "building")["commitSha"] == repo.sha_a  # listed while the deploy runs
    record = stack.wait_for(pr, "running", repo.sha_a)
    assert record["framework"] == framework and record["dbType"] == database
    assert 8000 <= record["exposedAppPort"] < 9000 and 9000 <= record["exposedDbPort"] < 10000
    stack.wait_page(pr, f"{framework} says: commit A\n")
    assert stack.page(pr, "db").text == "db reachable"
    for service in ("app", "db"):  # the bounds no repository can lift (docs/security.md, "Between previews")
        host = json.loads(subprocess.run(["docker", "inspect", "--format", "{{json .HostConfig}}",
                                          f"{SLUG}-pr-{pr}-{service}"], capture_output=True, text=True,
                                         timeout=30, check=True).stdout)
        assert host["PidsLimit"] == 1024 and {"NET_RAW", "CAP_NET_RAW"} & set(host["CapDrop"]), service
        assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "3", "max-size": "10m"}}, service
    url = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
    assert record["url"] == url
    stack.wait_comment(pr, "Preview ready", url, repo.sha_a[:7])

    stack.send("synchronize", pr, repo, repo.sha_b)
    updated = stack.wait_for(pr, "running", repo.sha_b)
    assert (updated["exposedAppPort"], updated["exposedDbPort"]) == (record["exposedAppPort"],
                                                                      record["exposedDbPort"])
    stack.wait_page(pr, f"{framework} says: commit B\n")
    stack.wait_comment(pr, "Preview ready", repo.sha_b[:7])

    stack.close(pr, repo, repo.sha_b)
    stack.wait_comment(pr, "Preview removed")


def test_extra_services_are_wired_end_to_end(stack: Stack) -> None:
    pr = 20
    repo = make_pr_repo(stack.root / "repos", "python", "feature/services",
                        config=config_for("python", "postgres", extra_services=["redis", "memcached"]))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    stack.wait_page(pr, "redis: +PONG", "redis")
    assert stack.page(pr, "memcached").text.startswith("memcached: VERSION")
    headers = stack.page(pr, "headers").text.lower()
    assert f"x-forwarded-prefix: /{SLUG}/pr-{pr}" in headers and "x-real-ip: 127.0.0.1" in headers
    stack.close(pr, repo, repo.sha_a)


FAILURES = [
    (30, {"drop": ("preview-config.yml",)},
     "preview-config.yml is required at repository root but was not found"),
    (31, {"config": config_for("python", build_commands=["echo building", "exit 3"])},
     "Build command failed: exit 3"),
    (32, {"config": config_for("python"), "files": {"Dockerfile": "FROM po-standin/python:test\nRUN false\n"}},
     "Docker build failed"),
    (33, {"config": config_for("python", health_check_path="/never")}, "Health check timeout"),
    (34, {"config": config_for("python"), "files": {"Dockerfile": (
        "FROM po-standin/python:test\nCOPY ../../../../etc/shadow /stolen\n")}}, "Docker build failed"),
]


@pytest.mark.parametrize(("pr", "setup", "message"), FAILURES, ids=["no-config", "build-command",
                                                                     "docker-build", "unhealthy",
                                                                     "dockerfile-escapes-context"])
def test_failures_are_reported_and_cleaned(stack: Stack, pr: int, setup: dict, message: str) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", f"fail/{pr}", **setup)
    stack.send("opened", pr, repo, repo.sha_a)
    if message == "Health check timeout":  # loaded while the app comes up, closed: 404 as if it did not exist
        wait_until(lambda: stack.page(pr).headers.get("X-Preview-Closed") == f"{SLUG}-{pr}", timeout=120,
                   message="the route loaded closed")
        assert stack.records()[f"{SLUG}-{pr}"]["status"] == "building" and stack.page(pr).status_code == 404
    record = stack.wait_for(pr, "failed")
    # A new preview that failed has no route, open or closed.
    assert not (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").exists()
    assert not (stack.root / "proxy" / "open" / f"{SLUG}-pr-{pr}").exists()
    assert record["error"] == message
    comment = stack.wait_comment(pr, message, "Preview failed", "Push a new commit to retry")
    if message == "Health check timeout":
        assert "GET /never" in comment  # the app's own output, from `compose logs`, in the failure comment
    assert f"{SLUG}-{pr}" in stack.store()["portAllocations"]  # kept for the retry
    running = subprocess.run(["docker", "ps", "-q", "--filter", f"label={DEPLOYMENT_LABEL}={SLUG}-{pr}"],
                             capture_output=True, text=True, timeout=60).stdout.split()
    assert running == []  # half-started containers were stopped
    stack.close(pr, repo, repo.sha_a)


def test_a_route_that_fails_nginx_t_is_rolled_back(stack: Stack) -> None:
    healthy_pr, pr = 40, 41
    healthy = make_pr_repo(stack.root / "repos", "python", "proxy/ok", config=config_for("python"))
    stack.send("opened", healthy_pr, healthy, healthy.sha_a)
    stack.wait_for(healthy_pr, "running")
    stack.wait_page(healthy_pr, "python says: commit A\n")
    # A duplicate location for pr-41 makes nginx -t reject the route the service writes.
    blocker = stack.root / "proxy" / "zz-blocker.conf"
    blocker.write_text(f"location /{SLUG}/pr-{pr}/ {{ return 418; }}\n")
    try:
        repo = make_pr_repo(stack.root / "repos", "python", "proxy/bad", config=config_for("python"))
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "failed")
        assert record["error"] == "Nginx reload failed"
        stack.wait_comment(pr, "Nginx reload failed")
        assert not (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").exists()  # rolled back
    finally:
        blocker.unlink()
    assert stack.page(healthy_pr).text == "python says: commit A\n"  # the other route still serves
    for number, source in ((pr, repo), (healthy_pr, healthy)):
        stack.close(number, source, source.sha_a)


def test_a_failed_preview_is_retried_by_the_next_push(stack: Stack) -> None:
    pr = 35
    repo = make_pr_repo(stack.root / "repos", "python", "fail/retry",
                        config=config_for("python", build_commands=["test -f fixed"]), files_b={"fixed": "yes\n"})
    stack.send("opened", pr, repo, repo.sha_a)
    assert stack.wait_for(pr, "failed")["error"] == "Build command failed: test -f fixed"
    stack.send("synchronize", pr, repo, repo.sha_b)
    record = stack.wait_for(pr, "running", repo.sha_b)
    assert record["error"] is None
    stack.wait_page(pr, "python says: commit B\n")
    stack.wait_comment(pr, "Preview ready", repo.sha_b[:7])
    stack.close(pr, repo, repo.sha_b)
