"""A third-party runtime plugin, end to end: `plain` of the example distribution (tests/example_plugin/po_plain,
written only from docs/plugins.md and orchestrator/plugin_api/runtime.py, installed by scripts/test) builds, runs,
updates and removes a preview through the real service process, Docker, nginx and git, with the base class's
defaults for everything it does not do; doctor shows its own line and names its own settings."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from orchestrator.rendering.plugin_host import build_plugin_host
from tests.support.git_repos import make_pr_repo
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.uses("python", "postgres")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if "plain" not in build_plugin_host().provided.runtimes:
        pytest.fail("the example distribution is not installed: run scripts/test (or pip install -e "
                    "tests/example_plugin)")
    running = start_stack(tmp_path_factory.mktemp("plain-runtime"), RUNTIME="plain", PREVIEW_IDLE_MINUTES="5")
    yield running
    stop_stack(running)


def doctor(stack: Stack, **env: str) -> str:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "doctor"], cwd=stack.root,
                          env={**stack.service.env, **env}, capture_output=True, text=True, timeout=120).stdout


def test_a_third_party_runtime_deploys_updates_and_removes_a_preview(stack: Stack) -> None:
    pr = 41
    repo = make_pr_repo(stack.root / "repos", "python", "feature/plain", config=config_for("python", "postgres"))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    stack.wait_page(pr, "python says: commit A\n")
    assert stack.page(pr, "db").text == "db reachable"
    assert "the plain runtime starts the preview with docker compose up" in stack.logs(pr)
    # The base's default `wake`: previews of a runtime without its own never sleep, so the route (with
    # PREVIEW_IDLE_MINUTES set) has no wake location and logs no activity.
    route = (stack.root / "proxy" / f"{SLUG}-pr-{pr}.conf").read_text()
    assert "proxy_pass" in route and "preview-wake" not in route and "access_log" not in route

    stack.send("synchronize", pr, repo, repo.sha_b)
    stack.wait_for(pr, "running", repo.sha_b)
    stack.wait_page(pr, "python says: commit B\n")
    stack.wait_comment(pr, "Preview ready", repo.sha_b[:7])
    stack.close(pr, repo, repo.sha_b)
    assert f"{SLUG}-{pr}" not in stack.records()


def test_doctor_shows_the_runtime_s_own_line_and_settings(stack: Stack) -> None:
    assert "✓ docker compose for the plain runtime: version " in doctor(stack)
    report = doctor(stack, PLAIN_COMPOSE_TIMEOUT_SECONDS="soon")
    line = next(line for line in report.splitlines() if "(RUNTIME=plain)" in line)
    assert line.startswith("✗ the runtime (RUNTIME=plain)'s settings: PLAIN_COMPOSE_TIMEOUT_SECONDS is not valid"), line
