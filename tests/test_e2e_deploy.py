"""End to end with real parts: signed webhooks into the real service (uvicorn), git clones of local
repositories, the Docker engine with compose v2 and stand-in images, a real nginx, and the fake code host."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from orchestrator.rendering import DEPLOYMENT_LABEL
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import ServiceProcess, wait_until
from tests.support.nginx import Nginx
from tests.support.payloads import pr_payload, webhook_headers
from tests.support.repos import config_for
from tests.support.standins import overrides_setting, require_engine

pytestmark = [pytest.mark.docker, pytest.mark.live]
SLUG = "codertocat-hello-world"
DEPLOY_TIMEOUT = 420


@dataclass
class Stack:
    service: ServiceProcess
    nginx: Nginx
    codehost: FakeCodeHost
    root: Path

    def send(self, action: str, pr: int, repo: PullRequestRepo, sha: str) -> None:
        body = pr_payload(action, number=pr, sha=sha, clone_url=repo.clone_url, ref=repo.branch)
        response = httpx.post(f"{self.service.url}/webhook/codehost", content=body,
                              headers=webhook_headers(body), timeout=10)
        assert response.status_code == 200, response.text

    def records(self) -> dict[str, dict]:
        deployments = httpx.get(f"{self.service.url}/api/previews", timeout=10).json()["deployments"]
        return {d["deploymentId"]: d for d in deployments}

    def store(self) -> dict:
        return json.loads((self.root / "state" / "deployments.json").read_text())

    def wait_for(self, pr: int, status: str, sha: str | None = None) -> dict:
        deployment = f"{SLUG}-{pr}"

        def settled() -> bool:
            record = self.records().get(deployment)
            return bool(record and record["status"] == status and (sha is None or record["commitSha"] == sha))

        try:
            wait_until(settled, timeout=DEPLOY_TIMEOUT, message=f"{deployment} {status}")
        except AssertionError:
            log = self.root / "deployments" / SLUG / f"pr-{pr}.log"
            tail = log.read_text()[-4000:] if log.exists() else "(no log)"
            raise AssertionError(f"{deployment} not {status}: {self.records().get(deployment)}\n{tail}") from None
        return self.records()[deployment]

    def wait_gone(self, pr: int) -> None:
        wait_until(lambda: f"{SLUG}-{pr}" not in self.records(), timeout=DEPLOY_TIMEOUT, message="cleanup")

    def wait_page(self, pr: int, text: str, path: str = "") -> None:
        """nginx applies a reload asynchronously: the route serves a moment after the record says running."""
        wait_until(lambda: self.page(pr, path).text == text, timeout=15, message=f"page {path!r} = {text!r}")

    def page(self, pr: int, path: str = "") -> httpx.Response:
        return httpx.get(f"{self.nginx.url}/{SLUG}/pr-{pr}/{path}", timeout=10)

    def wait_comment(self, pr: int, *texts: str) -> str:
        """The comment follows the record (the spec's order: record, then comment)."""
        wait_until(lambda: all(t in self.comment(pr) for t in texts), timeout=30, message=f"comment {texts}")
        return self.comment(pr)

    def comment(self, pr: int) -> str:
        comments = self.codehost.comments_on("Codertocat", "Hello-World", pr)
        assert len(comments) == 1, comments  # one comment per pull request, edited in place
        return comments[0]["body"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_engine()
    root = tmp_path_factory.mktemp("e2e")
    codehost = FakeCodeHost().start()
    nginx = Nginx(root / "nginx", root / "proxy").start()
    service = ServiceProcess(
        root,
        CODEHOST_API_URL=codehost.url,
        PREVIEW_BASE_URL=nginx.url,
        IMAGE_OVERRIDES=overrides_setting(),
        ALLOWED_CLONE_PROTOCOLS="file",
        HEALTH_CHECK_INTERVAL_SECONDS="0.5",
        HEALTH_CHECK_TIMEOUT_SECONDS="20",
        PROXY_TEST_COMMAND=nginx.test_command,
        PROXY_RELOAD_COMMAND=nginx.reload_command,
        CODEHOST_RETRY_BASE_SECONDS="0.05",
        MAX_CONCURRENT_BUILDS="2",
    ).start()
    yield Stack(service, nginx, codehost, root)
    service.stop()
    nginx.stop()
    codehost.stop()


def labelled_resources(deployment_id: str) -> list[str]:
    found = []
    for argv in (["docker", "ps", "-aq"], ["docker", "volume", "ls", "-q"], ["docker", "network", "ls", "-q"]):
        output = subprocess.run([*argv, "--filter", f"label={DEPLOYMENT_LABEL}={deployment_id}"],
                                capture_output=True, text=True, timeout=60, check=True).stdout
        found += output.split()
    return found


def assert_fully_removed(stack: Stack, pr: int) -> None:
    deployment = f"{SLUG}-{pr}"
    assert labelled_resources(deployment) == []
    assert not (stack.root / "deployments" / SLUG / f"pr-{pr}").exists()
    assert not (stack.root / "deployments" / SLUG / f"pr-{pr}.log").exists()
    assert not (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").exists()
    store = stack.store()
    assert deployment not in store["deployments"] and deployment not in store["portAllocations"]
    wait_until(lambda: stack.page(pr).status_code == 404, timeout=10, message="route gone")


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
    url = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
    assert record["url"] == url
    stack.wait_comment(pr, "Preview ready", url, repo.sha_a[:7])

    stack.send("synchronize", pr, repo, repo.sha_b)
    updated = stack.wait_for(pr, "running", repo.sha_b)
    assert (updated["exposedAppPort"], updated["exposedDbPort"]) == (record["exposedAppPort"],
                                                                      record["exposedDbPort"])
    stack.wait_page(pr, f"{framework} says: commit B\n")
    stack.wait_comment(pr, "Preview ready", repo.sha_b[:7])

    stack.send("closed", pr, repo, repo.sha_b)
    stack.wait_gone(pr)
    assert_fully_removed(stack, pr)
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
    stack.send("closed", pr, repo, repo.sha_a)
    stack.wait_gone(pr)
    assert_fully_removed(stack, pr)


FAILURES = [
    (30, {"drop": ("preview-config.yml",)},
     "preview-config.yml is required at repository root but was not found"),
    (31, {"config": config_for("python", build_commands=["echo building", "exit 3"])},
     "Build command failed: exit 3"),
    (32, {"config": config_for("python"), "files": {"Dockerfile": "FROM po-standin/python:test\nRUN false\n"}},
     "Docker build failed"),
    (33, {"config": config_for("python", health_check_path="/never")}, "Health check timeout"),
]


@pytest.mark.parametrize(("pr", "setup", "message"), FAILURES, ids=["no-config", "build-command",
                                                                     "docker-build", "unhealthy"])
def test_failures_are_reported_and_cleaned(stack: Stack, pr: int, setup: dict, message: str) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", f"fail/{pr}", **setup)
    stack.send("opened", pr, repo, repo.sha_a)
    record = stack.wait_for(pr, "failed")
    assert record["error"] == message
    stack.wait_comment(pr, message, "Preview failed")
    assert f"{SLUG}-{pr}" in stack.store()["portAllocations"]  # kept for the retry
    running = subprocess.run(["docker", "ps", "-q", "--filter", f"label={DEPLOYMENT_LABEL}={SLUG}-{pr}"],
                             capture_output=True, text=True, timeout=60).stdout.split()
    assert running == []  # half-started containers were stopped
    stack.send("closed", pr, repo, repo.sha_a)
    stack.wait_gone(pr)
    assert_fully_removed(stack, pr)


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
        stack.send("closed", number, source, source.sha_a)
        stack.wait_gone(number)
        assert_fully_removed(stack, number)


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
    stack.send("closed", pr, repo, repo.sha_b)
    stack.wait_gone(pr)
    assert_fully_removed(stack, pr)
