"""Previews that sleep, end to end (Docker, nginx, the service under uvicorn, the fake code host): a preview goes to
sleep after the idle time with its containers stopped and its route kept; a request through nginx wakes it and
gets the app's answer; concurrent requests share one wake; a push to a sleeping preview deploys it; protection asks
before anything wakes; and every path — closed asleep, closed while waking, closed after a push — leaves nothing
behind. How long a wake takes is measured by bench/sleep.py (docs/benchmarks.md), not asserted here."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.http.resources.preview_wake import CLIENT_WAIT_SECONDS
from tests import test_protection
from tests.support import web
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import wait_until
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack
from tests.test_protection import PASSWORD

pytestmark = [pytest.mark.docker, pytest.mark.live]
open_dir = test_protection.open_dir  # a directory nginx's workers reach (its users file must be readable)

IDLE = {"PREVIEW_IDLE_SECONDS": "6", "SLEEP_CHECK_INTERVAL_SECONDS": "0.5"}
SLEEP_TIMEOUT = 60
PAGE_A, PAGE_B = "python says: commit A\n", "python says: commit B\n"


def container_states(deployment: str) -> dict[str, str]:
    """Container id -> state (running, exited, ...) of the deployment's containers."""
    output = subprocess.run(["docker", "ps", "-a", "--filter", f"label={DEPLOYMENT_LABEL}={deployment}",
                             "--format", "{{.ID}} {{.State}}"], capture_output=True, text=True, timeout=60,
                            check=True).stdout
    return dict(line.split(" ", 1) for line in output.splitlines() if line.strip())


def volumes(deployment: str) -> set[str]:
    output = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label={DEPLOYMENT_LABEL}={deployment}"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    return set(output.split())


def wait_asleep(stack: Stack, pr: int) -> dict:
    record = stack.wait_for(pr, "sleeping")
    deployment = f"{SLUG}-{pr}"
    wait_until(lambda: set(container_states(deployment).values()) == {"exited"}, timeout=30,
               message="containers stopped")
    return record


def deploy(stack: Stack, pr: int, branch: str) -> PullRequestRepo:
    repo = make_pr_repo(stack.root / "repos", "python", branch)
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    return repo


def metric(stack: Stack, line_start: str) -> str:
    text = web.get(f"{stack.service.url}/metrics", timeout=10).text
    return next((line for line in text.splitlines() if line.startswith(line_start)), "")


def test_an_idle_preview_sleeps_and_a_request_through_nginx_wakes_it(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, **IDLE)
    try:
        pr = 80
        deployment = f"{SLUG}-{pr}"
        repo = deploy(stack, pr, "feature/sleepy")
        assert stack.page(pr).text == PAGE_A
        awake_containers = set(container_states(deployment))
        kept_volumes = volumes(deployment)
        assert kept_volumes  # the database's data

        # idle: asleep, containers stopped (not removed), volumes, route, ports and the activity file kept
        record = wait_asleep(stack, pr)
        assert record["sleptAt"] is not None and record["url"] == f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        assert set(container_states(deployment)) == awake_containers and volumes(deployment) == kept_volumes
        assert (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").is_file()
        assert (stack.root / "proxy" / "activity" / f"{SLUG}-pr-{pr}.log").is_file()
        assert deployment in stack.store()["portAllocations"]
        stack.wait_comment(pr, "Preview sleeping — opens on the next visit", record["url"])
        assert metric(stack, 'preview_orchestrator_previews{status="sleeping"}').endswith(" 1.0")
        dashboard = web.get(f"{stack.service.url}/dashboard", timeout=10).text
        assert "status-sleeping" in dashboard and "opens on the next visit" in dashboard

        # a request through nginx wakes it and gets the app's answer, from the same containers
        answer = web.get(f"{stack.nginx.url}/{SLUG}/pr-{pr}/", timeout=60)
        assert answer.status_code == 200 and answer.text == PAGE_A
        assert answer.headers["x-preview-deployment"] == deployment
        assert stack.records()[deployment]["status"] == "running"
        assert set(container_states(deployment).values()) == {"running"}
        assert set(container_states(deployment)) == awake_containers and volumes(deployment) == kept_volumes
        assert stack.page(pr, "db").text == "db reachable"
        stack.wait_comment(pr, "Preview ready", "woken up in")

        # asleep again: concurrent requests all get the app's answer, and one wake runs; the code host is slow to
        # write comments meanwhile, and the requests do not wait for the wake's comment
        wait_asleep(stack, pr)
        stack.wait_comment(pr, "Preview sleeping")
        stack.codehost.comment_writes = threading.Event()
        url = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        try:
            began = time.monotonic()
            with ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(lambda _: web.get(url, timeout=90), range(6)))
            assert [(a.status_code, a.text, a.headers.get("x-preview-deployment")) for a in answers] == [
                (200, PAGE_A, deployment)] * 6
            # answered once awake, not when the wait for the flow (CLIENT_WAIT_SECONDS) ran out
            assert time.monotonic() - began < CLIENT_WAIT_SECONDS / 2
            assert "Preview sleeping" in stack.comment(pr)  # the wake's comment is still on its way
        finally:
            stack.codehost.comment_writes.set()
        stack.wait_comment(pr, "Preview ready", "woken up in")
        assert stack.logs(pr).count("a request came: waking up") == 2  # one per sleep
        assert metric(stack, 'preview_orchestrator_wakes_total{result="success"}').endswith(" 2.0")

        # closed while asleep: nothing is left (stopped containers, volumes, network, route, activity file, ...)
        wait_asleep(stack, pr)
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)


def test_pushes_to_a_sleeping_or_waking_preview_deploy_it_and_a_close_during_a_wake_leaves_nothing(
        tmp_path: Path) -> None:
    stack = start_stack(tmp_path, **IDLE)
    try:
        pr = 81
        deployment = f"{SLUG}-{pr}"
        repo = deploy(stack, pr, "feature/sleepy-push")
        wait_asleep(stack, pr)
        stack.send("synchronize", pr, repo, repo.sha_b)
        record = stack.wait_for(pr, "running", repo.sha_b)
        assert record["sleptAt"] is None
        assert stack.page(pr).text == PAGE_B
        assert set(container_states(deployment).values()) == {"running"}

        # asleep again; a request starts a wake and a push (back to commit A) arrives meanwhile: it waits for
        # the wake, then deploys; the request is answered by the app
        wait_asleep(stack, pr)
        waking, answers = request_in_background(stack, pr)
        stack.send("synchronize", pr, repo, repo.sha_a)
        stack.wait_for(pr, "running", repo.sha_a)
        waking.join(60)
        assert len(answers) == 1 and isinstance(answers[0], httpx.Response)
        assert answers[0].status_code == 200 and answers[0].text in (PAGE_A, PAGE_B)
        assert stack.page(pr).text == PAGE_A
        log = stack.logs(pr)
        assert log.index("awake after") < log.rindex(f"update of {repo.sha_a}")  # one after the other

        # asleep again; a request starts a wake and the pull request closes meanwhile
        wait_asleep(stack, pr)
        waking, answers = request_in_background(stack, pr)
        stack.close(pr, repo, repo.sha_a)
        waking.join(60)
        assert answers and not isinstance(answers[0], Exception)  # answered (the app, or nginx once it was gone)
        assert_fully_removed(stack, pr)
    finally:
        stop_stack(stack)


def request_in_background(stack: Stack, pr: int) -> tuple[threading.Thread, list[object]]:
    """A request to the sleeping preview, in a thread; returns once its wake has begun."""
    answers: list[object] = []
    waking = threading.Thread(target=lambda: answers.append(_get(f"{stack.nginx.url}/{SLUG}/pr-{pr}/")))
    before = stack.logs(pr).count("a request came: waking up")
    waking.start()
    wait_until(lambda: stack.logs(pr).count("a request came: waking up") > before, timeout=30,
               message="wake started")
    return waking, answers


def _get(url: str) -> httpx.Response | Exception:
    try:
        return web.get(url, timeout=60)
    except httpx.HTTPError as exc:
        return exc


def test_protection_asks_for_credentials_before_a_request_wakes_a_preview(open_dir: Path) -> None:
    stack = start_stack(open_dir, PREVIEW_PROTECTION="basic", PREVIEW_PROTECTION_USERS=f"reviewer:{PASSWORD}", **IDLE)
    try:
        pr = 82
        deployment = f"{SLUG}-{pr}"
        repo = deploy(stack, pr, "feature/sleepy-protected")
        wait_asleep(stack, pr)
        url = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
        for auth in (None, ("reviewer", "wrong")):
            refused = web.get(url, auth=auth, timeout=30)
            assert refused.status_code == 401 and refused.headers["x-preview-deployment"] == deployment
        time.sleep(1.5)  # a wake, had one been queued, would have started by now
        assert stack.records()[deployment]["status"] == "sleeping"
        assert set(container_states(deployment).values()) == {"exited"}
        assert "waking up" not in stack.logs(pr)
        page = web.get(url, auth=("reviewer", PASSWORD), timeout=60)
        assert page.status_code == 200 and page.text == PAGE_A
        assert stack.records()[deployment]["status"] == "running"
        stack.close(pr, repo, repo.sha_a)
    finally:
        stop_stack(stack)
