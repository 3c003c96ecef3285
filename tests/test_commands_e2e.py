"""`/preview …` commands end to end (issue: the pull request as the control surface): comments delivered to the
real service, which asks the fake code host who may write, and acts through real Docker, nginx and git."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import comment_payload, pr_payload, webhook_headers
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack
from tests.test_database_seeds import db_password, psql

pytestmark = [pytest.mark.docker, pytest.mark.live]
OWNER, NAME = "Codertocat", "Hello-World"
MARKER = "<!-- preview-orchestrator -->"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("commands"))
    running.codehost.permissions.update({"maintainer": "write"})
    yield running
    stop_stack(running)


def comment(stack: Stack, pr: int, text: str, user: str) -> None:
    body = comment_payload(pr, text, user)
    answer = web.post(f"{stack.service.url}/webhook/codehost", content=body,
                      headers=webhook_headers(body, event="issue_comment"), timeout=10)
    assert answer.status_code == 200, answer.text


def comments(stack: Stack, pr: int) -> list[str]:
    return [c["body"] for c in stack.codehost.comments_on(OWNER, NAME, pr)]


def wait_reply(stack: Stack, pr: int, *texts: str) -> str:
    """A reply (a comment of its own, not the sticky one) holding every text."""
    def found() -> str | None:
        return next((body for body in comments(stack, pr) if MARKER not in body and all(t in body for t in texts)),
                    None)
    wait_until(lambda: found() is not None, timeout=30, message=f"a reply with {texts}")
    return found() or ""


def sticky(stack: Stack, pr: int) -> str:
    """The service's one comment (replies are others)."""
    marked = [body for body in comments(stack, pr) if MARKER in body]
    assert len(marked) == 1, marked
    return marked[0]


def commands_done(stack: Stack, pr: int) -> int:
    deliveries = web.get(f"{stack.service.url}/api/deliveries", params={"pr": str(pr)}, timeout=10).json()
    return sum(d["action"] == "command" and d["outcome"] == "accepted" for d in deliveries["deliveries"])


def test_collaborators_run_commands_and_others_get_a_reply(stack: Stack) -> None:
    pr = 81
    repo = make_pr_repo(stack.root / "repos", "python", "feature/commands", config=config_for("python", "postgres"))
    stack.send("opened", pr, repo, repo.sha_a)
    first = stack.wait_for(pr, "running", repo.sha_a)
    password = db_password(pr)
    assert psql(pr, password, "CREATE TABLE written_by_the_app (x int); INSERT INTO written_by_the_app VALUES (1)"
                ).returncode == 0

    # Someone without write permission: a reply, and nothing else changes.
    comment(stack, pr, "/preview destroy", "mallory")
    assert "commands need write permission on Codertocat/Hello-World: nothing was done" in wait_reply(stack, pr,
                                                                                                    "@mallory")
    assert stack.records()[f"{SLUG}-{pr}"]["updatedAt"] == first["updatedAt"]
    assert psql(pr, password, "SELECT count(*) FROM written_by_the_app").stdout.strip() == "1"

    # reset-db: the database as a new preview's, the app started again against it.
    comment(stack, pr, "/preview reset-db", "maintainer")
    wait_until(lambda: "Started by `/preview reset-db` from @maintainer" in sticky(stack, pr)
               and "Preview ready" in sticky(stack, pr), timeout=120, message="reset-db done")
    stack.wait_for(pr, "running", repo.sha_a)
    missing = psql(pr, db_password(pr), "SELECT count(*) FROM written_by_the_app")
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    stack.wait_page(pr, "python says: commit A\n")
    assert stack.page(pr, "db").text == "db reachable"  # the app reaches the new database

    # The operator's own reset (the API): the same, answered once done.
    assert psql(pr, db_password(pr), "CREATE TABLE again_by_the_app (x int)").returncode == 0
    reset = web.post(f"{stack.service.url}/api/previews/{SLUG}-{pr}/reset-db", json={}, timeout=300)
    assert reset.status_code == 200, reset.text
    assert "does not exist" in psql(pr, db_password(pr), "SELECT count(*) FROM again_by_the_app").stderr
    assert "Started by the service's operator" in sticky(stack, pr)

    # redeploy: the same commit built and started again (its log says so), the comment says who asked.
    updates = stack.logs(pr).count("update of")
    comment(stack, pr, "/preview redeploy", "maintainer")
    wait_until(lambda: stack.logs(pr).count("update of") == updates + 1 and "from @maintainer" in sticky(stack, pr)
               and "Started by `/preview redeploy`" in sticky(stack, pr) and "Preview ready" in sticky(stack, pr),
               timeout=120, message="redeployed")

    before = stack.records()[f"{SLUG}-{pr}"]["updatedAt"]
    comment(stack, pr, "/preview extend", "maintainer")
    assert "The preview is kept until" in wait_reply(stack, pr, "@maintainer", "kept until")
    # the time-to-live counts from now: CLEANUP_TTL_DAYS reads the record's updatedAt
    assert stack.records()[f"{SLUG}-{pr}"]["updatedAt"] > before
    comment(stack, pr, "/preview `@team` frobnicate", "maintainer")  # never echoed
    reply = wait_reply(stack, pr, "not a `/preview` command")
    assert "@team" not in reply and "frobnicate" not in reply and "/preview redeploy" in reply

    comment(stack, pr, "/preview destroy", "maintainer")
    stack.wait_gone(pr)
    assert_fully_removed(stack, pr)
    assert "Started by `/preview destroy` from @maintainer" in sticky(stack, pr)
    assert commands_done(stack, pr) == 6  # the operator's reset is not a delivery


def test_a_forks_pull_request_is_deployed_once_approved(stack: Stack) -> None:
    pr = 82
    repo = make_pr_repo(stack.root / "repos", "python", "fork/feature", config=config_for("python", "postgres"))
    fork = {"full_name": "someone/Hello-World", "name": "Hello-World", "owner": {"login": "someone"}}
    stack.codehost.open_pull(OWNER, NAME, pr, repo.branch, repo.sha_a, repo.clone_url)
    stack.codehost.pulls[(OWNER, NAME)][pr]["head"]["repo"] = {**fork, "clone_url": repo.clone_url}
    body = pr_payload("opened", number=pr, sha=repo.sha_a, clone_url=repo.clone_url, ref=repo.branch, repo=fork)
    assert web.post(f"{stack.service.url}/webhook/codehost", content=body, headers=webhook_headers(body),
                    timeout=10).status_code == 200
    wait_until(lambda: any(f"/preview approve {repo.sha_a}" in body for body in comments(stack, pr)),
               timeout=30, message="the fork's refusal names the command")
    assert f"{SLUG}-{pr}" not in stack.records()

    comment(stack, pr, f"/preview approve {repo.sha_a}", "mallory")  # not a collaborator
    wait_reply(stack, pr, "@mallory", "need write permission")
    comment(stack, pr, f"/preview approve {repo.sha_a[:7]}", "maintainer")  # a prefix: anyone can make one match
    wait_reply(stack, pr, "That is not the pull request's head", f"The head is {repo.sha_a}")
    comment(stack, pr, "/preview approve", "maintainer")
    wait_reply(stack, pr, "needs the full id of the commit you reviewed")
    assert f"{SLUG}-{pr}" not in stack.records()

    comment(stack, pr, f"/preview approve {repo.sha_a}", "maintainer")
    stack.wait_for(pr, "running", repo.sha_a)
    stack.wait_page(pr, "python says: commit A\n")
    wait_until(lambda: "Started by `/preview approve` from @maintainer" in sticky(stack, pr)
               and "Preview ready" in sticky(stack, pr), timeout=30, message="the approved deploy's comment")

    # A later push of the fork is not deployed without another approval: its event runs, the preview stays.
    push = pr_payload("synchronize", number=pr, sha=repo.sha_b, clone_url=repo.clone_url, ref=repo.branch, repo=fork)
    assert web.post(f"{stack.service.url}/webhook/codehost", content=push,
                    headers=webhook_headers(push, delivery="fork-push"), timeout=10).status_code == 200
    with_inbox = stack.root / "state" / "inbox.sqlite3"

    def push_finished() -> bool:
        with sqlite3.connect(with_inbox) as db:
            row = db.execute("SELECT status FROM events WHERE delivery_id = 'fork-push'").fetchone()
        return row is not None and row[0] == "done"
    wait_until(push_finished, timeout=30, message="the fork's push handled")
    assert stack.records()[f"{SLUG}-{pr}"]["commitSha"] == repo.sha_a
    held = sticky(stack, pr)  # still the approved preview's link, and how to approve the new commit
    assert f"/{SLUG}/pr-{pr}/" in held and f"approved commit `{repo.sha_a[:7]}`" in held
    assert f"`/preview approve {repo.sha_b}`" in held
    stack.wait_page(pr, "python says: commit A\n")
    stack.close(pr, repo, repo.sha_a)
