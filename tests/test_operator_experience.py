"""Issue 7 against the running service with real parts: the Deployments API statuses on the fake code host,
the deployment log (whole and followed while a build runs), the CLI's list/logs/cleanup, /metrics after real
deploys, and the dashboard in real headless Chromium."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import web
from tests.support.browser import chromium
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import REPO_ROOT
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live]
ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("operator"))
    yield running
    stop_stack(running)


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "PREVIEW_ORCHESTRATOR_URL": stack.service.url}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def environment(pr: int) -> str:
    return f"preview/{SLUG}/pr-{pr}"


def states(stack: Stack, pr: int) -> list[tuple[str, list[str]]]:
    return [(d["ref"], [s["state"] for s in d["statuses"]])
            for d in stack.codehost.deployments_of("Codertocat", "Hello-World", environment(pr))]


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if match and match[1] == name and ",".join(sorted((match[2] or "").split(","))) == wanted:
            return float(match[3])
    return 0.0


def test_status_logs_cli_and_metrics_follow_a_preview(stack: Stack) -> None:
    pr = 41
    # build_commands make the build last long enough to follow it, and print a secret-looking token.
    repo = make_pr_repo(stack.root / "repos", "python", "feature/ops",
                        config=config_for("python", "postgres",
                                          build_commands=["echo step one", "sleep 3", "echo step two"]))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "building")
    deployment = f"{SLUG}-{pr}"

    # Followed while the build runs: the stream ends by itself when the preview is running.
    followed = cli(stack, "logs", deployment, "--follow")
    assert followed.returncode == 0, followed.stderr
    record = stack.records()[deployment]
    assert record["status"] == "running"
    # compose's own program, as run (runtime/compose_program.py)
    for expected in ("$ git", "step one", "step two", "docker-compose --project-name", "health probe", "running after"):
        assert expected in followed.stdout, expected
    assert "live-test-token-8d2e" not in followed.stdout  # the service's token never appears

    # The same log, whole, over HTTP and the CLI; an unknown id is a 404 with the spec's error shape.
    whole = web.get(f"{stack.service.url}/api/previews/{deployment}/logs", timeout=10)
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("text/plain")
    assert whole.text.startswith(followed.stdout[:200]) and "running after" in whole.text
    missing = web.get(f"{stack.service.url}/api/previews/{SLUG}-999/logs", timeout=10)
    assert missing.status_code == 404 and missing.json() == {"error": "Deployment not found"}
    assert cli(stack, "logs", f"{SLUG}-999").returncode == 1

    # Deployments API: one deployment for commit A, in_progress then success with the preview's URL.
    wait_until(lambda: states(stack, pr) == [(repo.sha_a, ["in_progress", "success"])], timeout=30,
               message="success status")
    success = stack.codehost.deployments_of("Codertocat", "Hello-World", environment(pr))[0]["statuses"][-1]
    assert success["environment_url"] == record["url"]
    comment = stack.wait_comment(pr, "Preview ready", record["url"], repo.sha_a[:7], "built in")

    # A push: a new deployment for commit B; the one for A becomes inactive.
    stack.send("synchronize", pr, repo, repo.sha_b)
    stack.wait_for(pr, "running", repo.sha_b)
    wait_until(lambda: states(stack, pr) == [(repo.sha_a, ["in_progress", "success", "inactive"]),
                                             (repo.sha_b, ["in_progress", "success"])], timeout=30,
               message="statuses after the push")

    listing = cli(stack, "list")
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()[:2]
    assert header.split() == ["ID", "STATUS", "HOST", "PR", "BRANCH", "COMMIT", "AGE", "URL"]
    assert row.split()[:6] == [deployment, "running", "github", f"#{pr}", "feature/ops", repo.sha_b[:7]]

    metrics = web.get(f"{stack.service.url}/metrics", timeout=10)
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "metrics.txt").write_text(text)  # docs/operations.md's sample comes from here
    assert metric(text, "preview_orchestrator_deploys_total", framework="python", result="success") >= 2
    assert metric(text, "preview_orchestrator_deploy_duration_seconds_count", result="success") >= 2
    assert metric(text, "preview_orchestrator_health_check_duration_seconds_count", result="healthy") >= 2
    assert metric(text, "preview_orchestrator_previews_running") >= 1
    assert metric(text, "preview_orchestrator_webhooks_total", event="pull_request", outcome="accepted") >= 2
    assert metric(text, "preview_orchestrator_codehost_requests_total", kind="deployment", status="201") >= 2
    assert metric(text, "preview_orchestrator_codehost_requests_total", kind="deployment_status",
                  status="201") >= 5
    assert "preview_orchestrator_queue_depth" in text

    # cleanup through the CLI: the code host's deployment becomes inactive, the comment says removed.
    removed = cli(stack, "cleanup", deployment)
    assert removed.returncode == 0 and f"Preview {deployment} cleaned up" in removed.stdout
    assert deployment not in stack.records()
    assert states(stack, pr)[-1] == (repo.sha_b, ["in_progress", "success", "inactive"])
    stack.wait_comment(pr, "Preview removed")
    assert comment  # the ready comment was seen before the removal replaced it
    after = web.get(f"{stack.service.url}/metrics", timeout=10).text
    assert metric(after, "preview_orchestrator_cleanups_total", result="success") >= 1


def test_a_failed_deploy_reports_failure_with_the_log_tail(stack: Stack) -> None:
    pr = 42
    repo = make_pr_repo(stack.root / "repos", "python", "feature/ops-fail",
                        config=config_for("python", build_commands=["echo about to fail; exit 4"]))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "failed")
    # Reported after the record and the comment (the spec's order), so it may lag them a moment.
    wait_until(lambda: states(stack, pr) == [(repo.sha_a, ["in_progress", "failure"])], timeout=30,
               message="failure status")
    body = stack.wait_comment(pr, "Preview failed", "Build command failed: echo about to fail; exit 4",
                              "<summary>Last lines of the log</summary>\n\n```\nabout to fail\n```", "after",
                              "Push a new commit to retry, or close and reopen")
    assert repo.sha_a[:7] in body
    # counted once the flow has reported it (deploy.py: comment, status, then the count): a moment after the status
    wait_until(lambda: metric(web.get(f"{stack.service.url}/metrics", timeout=10).text,
                              "preview_orchestrator_deploys_total", framework="python", result="failure") >= 1,
               timeout=30, message="the failed deploy counted")
    stack.send("closed", pr, repo, repo.sha_a)
    stack.wait_gone(pr)
    wait_until(lambda: states(stack, pr) == [(repo.sha_a, ["in_progress", "failure", "inactive"])], timeout=30,
               message="inactive after close")


def test_codehost_deployments_can_be_turned_off(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, CODEHOST_DEPLOYMENTS="false")
    try:
        pr = 43
        repo = make_pr_repo(tmp_path / "repos", "python", "feature/no-deployments", config=config_for("python"))
        stack.send("opened", pr, repo, repo.sha_a)
        stack.wait_for(pr, "running")
        stack.wait_comment(pr, "Preview ready")
        assert not [c for c in stack.codehost.calls if "/deployments" in c.path]
        stack.send("closed", pr, repo, repo.sha_a)
        stack.wait_gone(pr)
        assert not [c for c in stack.codehost.calls if "/deployments" in c.path]
    finally:
        stop_stack(stack)


def test_dashboard_shows_a_preview_building_then_running_without_reload(stack: Stack) -> None:
    pr = 44
    repo = make_pr_repo(stack.root / "repos", "python", "feature/<b>bold</b>",
                        config=config_for("python", build_commands=["sleep 8"]))
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as browser:
        browser.get(f"{stack.service.url}/dashboard")
        assert browser.title == "Previews · Preview Orchestrator"
        browser.execute_script("window.__notReloaded = true;")
        stack.send("opened", pr, repo, repo.sha_a)

        def row() -> dict[str, str] | None:
            # Read in one script: the page re-renders its rows every 2 s, so element handles go stale.
            return browser.execute_script("""
                const row = document.querySelector(`tr[data-id="${arguments[0]}"]`);
                if (!row) return null;
                const text = sel => row.querySelector(sel).textContent;
                return {status: text(".status"), branch: text(".branch"), commit: text(".commit"),
                        boldTags: row.querySelectorAll("td.branch b").length.toString(),
                        url: row.querySelector("a.url").href, log: row.querySelector("a.log").href};
            """, f"{SLUG}-{pr}")

        wait_until(lambda: (row() or {}).get("status") == "building", timeout=60, message="row shows building")
        shown = row()
        assert shown is not None
        # The hostile branch name is shown as text, never parsed as HTML.
        assert shown["branch"] == "feature/<b>bold</b>" and shown["boldTags"] == "0"
        browser.save_screenshot(str(ARTIFACTS / "dashboard-building.png"))
        wait_until(lambda: (row() or {}).get("status") == "running", timeout=300, message="row shows running")
        assert browser.execute_script("return window.__notReloaded === true;")
        shown = row()
        assert shown is not None
        assert shown["commit"] == repo.sha_a[:7]
        assert shown["url"] == f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        assert shown["log"] == f"{stack.service.url}/api/previews/{SLUG}-{pr}/logs"
        assert browser.get_log("browser") == []  # no script error, no refused asset (everything is inline)
        browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    stack.send("closed", pr, repo, repo.sha_a)
    stack.wait_gone(pr)


def test_follow_ends_when_the_preview_is_removed(stack: Stack) -> None:
    pr = 45
    repo = make_pr_repo(stack.root / "repos", "python", "feature/follow-close",
                        config=config_for("python", build_commands=["sleep 30"]))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "building")
    result: dict[str, object] = {}

    def follow() -> None:
        began = time.monotonic()
        with web.stream("GET", f"{stack.service.url}/api/previews/{SLUG}-{pr}/logs", params={"follow": "true"},
                        timeout=httpx.Timeout(10, read=120)) as response:
            result["text"] = b"".join(response.iter_bytes()).decode()
        result["seconds"] = time.monotonic() - began

    reader = threading.Thread(target=follow)
    reader.start()
    wait_until(lambda: "$ sh -c sleep 30" in web.get(
        f"{stack.service.url}/api/previews/{SLUG}-{pr}/logs", timeout=10).text, timeout=60, message="sleep runs")
    stack.send("closed", pr, repo, repo.sha_a)  # queued behind the build; the stream ends after the cleanup
    reader.join(180)
    assert not reader.is_alive()
    assert "$ sh -c sleep 30" in str(result["text"])
    stack.wait_gone(pr)
