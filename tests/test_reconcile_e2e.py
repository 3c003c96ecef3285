"""The reconcile end to end (issue: nothing missed): the real service under uvicorn, git, Docker and nginx, and
the fake code host listing its open pull requests — changes no webhook brought are caught up, a code host that
cannot be reached changes nothing, and a deploy in progress never gets a second flow."""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live]
OWNER, NAME = "Codertocat", "Hello-World"
RECONCILED = "no webhook reported this change"
SETTLE_SECONDS = 21  # a preview deployed less than 20 s before a listing is never removed for missing from it


def events_of(stack: Stack, deployment: str) -> list[tuple[str, str]]:
    """(action, delivery id) of every event the inbox accepted for `deployment`, oldest first."""
    with sqlite3.connect(stack.root / "state" / "inbox.sqlite3") as db:
        return db.execute("SELECT action, delivery_id FROM events WHERE deployment_id = ? ORDER BY seq",
                          (deployment,)).fetchall()


def restart_with_reconcile(stack: Stack, minutes: str) -> None:
    stack.service.stop()
    stack.service.env["RECONCILE_INTERVAL_MINUTES"] = minutes
    stack.service.start()


def test_changes_no_webhook_brought_are_caught_up(tmp_path: Path) -> None:
    stack = start_stack(tmp_path)  # RECONCILE_INTERVAL_MINUTES=0: webhooks alone, until the restart
    try:
        missed = make_pr_repo(stack.root / "repos", "python", "feature/missed", config=config_for("python",
                                                                                                  "postgres"))
        closing = make_pr_repo(stack.root / "repos", "python", "feature/closing", config=config_for("python",
                                                                                                    "postgres"))
        stack.codehost.open_pull(OWNER, NAME, 72, closing.branch, closing.sha_a, closing.clone_url)
        stack.send("opened", 72, closing, closing.sha_a)
        deployed = stack.wait_for(72, "running", closing.sha_a)
        stack.service.stop()
        # While the service is down: pull request 71 is opened, 72 is closed.
        stack.codehost.open_pull(OWNER, NAME, 71, missed.branch, missed.sha_a, missed.clone_url)
        stack.codehost.close_pull(OWNER, NAME, 72)
        settled = datetime.fromisoformat(deployed["updatedAt"]).timestamp() + SETTLE_SECONDS
        time.sleep(max(0.0, settled - time.time()))
        restart_with_reconcile(stack, "0.05")  # a look at start-up, then every 3 s

        stack.wait_for(71, "running", missed.sha_a)
        assert RECONCILED in stack.wait_comment(71, "Preview ready", missed.sha_a[:7])
        stack.wait_page(71, "python says: commit A\n")
        stack.wait_gone(72)
        assert_fully_removed(stack, 72)
        assert RECONCILED in stack.comment(72)
        assert [action for action, _ in events_of(stack, f"{SLUG}-72")] == ["opened", "closed"]

        # A push whose webhook never came: the next look updates the preview.
        stack.codehost.push_pull(OWNER, NAME, 71, missed.sha_b)
        stack.wait_for(71, "running", missed.sha_b)
        stack.wait_page(71, "python says: commit B\n")
        assert RECONCILED in stack.wait_comment(71, "Preview ready", missed.sha_b[:7])
        metrics = web.get(f"{stack.service.url}/metrics", timeout=10).text
        for action in ("opened", "synchronize", "closed"):
            assert f'preview_orchestrator_reconcile_corrections_total{{action="{action}",codehost="github"}} 1.0' \
                in metrics, action

        # The code host cannot be reached: pull request 71 is closed there, and nothing happens to its preview
        # through two looks; once the host answers again, the next look removes it.
        stack.codehost.listing_down = True
        stack.codehost.close_pull(OWNER, NAME, 71)
        before = len(stack.codehost.listing_calls())
        wait_until(lambda: sum(call.status == 503 for call in stack.codehost.listing_calls()[before:]) >= 8,
                   timeout=30, message="two looks at an unreachable host (4 attempts each)")
        assert stack.records()[f"{SLUG}-71"]["status"] == "running"
        assert [action for action, _ in events_of(stack, f"{SLUG}-71")] == ["opened", "synchronize"]
        stack.codehost.listing_down = False
        stack.wait_gone(71)
        assert_fully_removed(stack, 71)
    finally:
        stop_stack(stack)


def test_a_look_during_a_deploy_starts_no_second_flow(tmp_path: Path) -> None:
    stack = start_stack(tmp_path, RECONCILE_INTERVAL_MINUTES="0.02")  # a look every 1.2 s
    try:
        slow = make_pr_repo(stack.root / "repos", "python", "feature/slow",
                            config=config_for("python", "postgres", build_commands=["sleep 6"]))
        # The pull request is listed from the moment it is opened, and its webhook arrives too.
        stack.codehost.open_pull(OWNER, NAME, 73, slow.branch, slow.sha_a, slow.clone_url)
        stack.send("opened", 73, slow, slow.sha_a)
        stack.wait_for(73, "building")
        looks = len(stack.codehost.listing_calls())
        stack.wait_for(73, "running", slow.sha_a)
        assert len(stack.codehost.listing_calls()) - looks >= 3  # looked at it while it was building
        seen = len(stack.codehost.listing_calls())
        wait_until(lambda: len(stack.codehost.listing_calls()) >= seen + 2, timeout=20,
                   message="two more looks at the running preview")
        assert [action for action, _ in events_of(stack, f"{SLUG}-73")] == ["opened"]
        assert not events_of(stack, f"{SLUG}-73")[0][1].startswith("reconcile-")
        assert RECONCILED not in stack.comment(73)
        stack.close(73, slow, slow.sha_a)
    finally:
        stop_stack(stack)
