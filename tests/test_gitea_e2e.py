"""A Gitea (and Forgejo) pull request end to end: the real service process, Docker, nginx and git; only Gitea's
REST API is a fake on 127.0.0.1 (tests/support/fake_codehost.py with Gitea's prefix). Deliveries are signed and
shaped as Gitea sends them (tests/fixtures/codehost-webhooks/gitea/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import FIXTURE_REPO, GITEA_REPO, GITEA_SECRET, gitea_headers, gitea_payload
from tests.support.repos import config_for
from tests.support.stack import Stack, assert_fully_removed, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.uses("python", "postgres")]
SLUG = "gitea-webhooks"
OWNER, NAME = GITEA_REPO.split("/")


@pytest.fixture(scope="module")
def gitea() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost(prefix="/api/v1").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def stack(gitea: FakeCodeHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("gitea-e2e"), GITEA_URL=gitea.url, GITEA_TOKEN="gitea-token-e2e",
                          GITEA_WEBHOOK_SECRET=GITEA_SECRET, ALLOWED_REPOS=f"{FIXTURE_REPO},gitea:{GITEA_REPO}")
    yield running
    stop_stack(running)


def deliver(stack: Stack, body: bytes, expect: int = 200, **headers: object) -> httpx.Response:
    response = web.post(f"{stack.service.url}/webhook/gitea", content=body, timeout=10,
                        headers=gitea_headers(body, **headers))  # type: ignore[arg-type]
    assert response.status_code == expect, response.text
    return response


def record(stack: Stack, pr: int) -> dict | None:
    return stack.records().get(f"{SLUG}-{pr}")


def wait_running(stack: Stack, pr: int, sha: str) -> dict:
    def settled() -> bool:
        found = record(stack, pr)
        return bool(found and found["status"] == "running" and found["commitSha"] == sha)

    wait_until(settled, timeout=420, message=f"{SLUG}-{pr} running at {sha[:7]}")
    found = record(stack, pr)
    assert found is not None
    return found


def comment(gitea: FakeCodeHost, pr: int) -> str:
    comments = gitea.comments_on(OWNER, NAME, pr)
    assert len(comments) == 1, comments  # one comment, edited in place
    return str(comments[0]["body"])


def test_a_gitea_pull_request_opens_updates_and_closes_its_preview(stack: Stack, gitea: FakeCodeHost) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", "feature/gitea", config=config_for("python"))
    deliver(stack, gitea_payload("opened", number=7, sha=repo.sha_a, clone_url=repo.clone_url, ref=repo.branch))
    opened = wait_running(stack, 7, repo.sha_a)
    assert opened["codehost"] == "gitea" and opened["url"].endswith(f"/{SLUG}/pr-7/")
    wait_until(lambda: stack.page(7, slug=SLUG).text == "python says: commit A\n", timeout=15, message="page A")
    wait_until(lambda: opened["url"] in comment(gitea, 7), timeout=30, message="the URL in the comment")
    wait_until(lambda: [s["state"] for s in gitea.statuses_of(OWNER, NAME, repo.sha_a)] == ["pending", "success"],
               timeout=30, message="commit statuses")
    assert gitea.statuses_of(OWNER, NAME, repo.sha_a)[-1]["target_url"] == opened["url"]
    assert all(call.headers.get("Authorization") == "token gitea-token-e2e" for call in gitea.calls)

    # new commits, delivered by Forgejo: its own headers beside Gitea's
    deliver(stack, gitea_payload("synchronized", number=7, sha=repo.sha_b, clone_url=repo.clone_url,
                                 ref=repo.branch), forgejo=True, event_type="pull_request_sync")
    wait_running(stack, 7, repo.sha_b)
    wait_until(lambda: stack.page(7, slug=SLUG).text == "python says: commit B\n", timeout=15, message="page B")
    wait_until(lambda: repo.sha_b[:7] in comment(gitea, 7), timeout=30, message="the comment names commit B")

    # merged: everything of the preview goes
    deliver(stack, gitea_payload("closed", number=7, sha=repo.sha_b, clone_url=repo.clone_url, ref=repo.branch,
                                 merged=True))
    wait_until(lambda: record(stack, 7) is None, timeout=120, message="cleanup")
    assert_fully_removed(stack, 7, slug=SLUG)
    wait_until(lambda: "removed" in comment(gitea, 7).lower(), timeout=30, message="the removal in the comment")
    assert [s["state"] for s in gitea.statuses_of(OWNER, NAME, repo.sha_b)] == ["pending", "success"]


def test_bad_signatures_and_repositories_not_allowed_change_nothing(stack: Stack, gitea: FakeCodeHost,
                                                                   tmp_path: Path) -> None:
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/refused", config=config_for("python"))
    body = gitea_payload("opened", number=8, sha=repo.sha_a, clone_url=repo.clone_url, ref=repo.branch)
    calls = len(gitea.calls)
    unsigned = {key: value for key, value in gitea_headers(body).items()
                if key not in ("X-Gitea-Signature", "X-Gogs-Signature")}
    refused = web.post(f"{stack.service.url}/webhook/gitea", content=body, headers=unsigned, timeout=10)
    assert refused.status_code == 401 and refused.json() == {"error": "Invalid signature"}
    deliver(stack, body, expect=401, secret="not-the-secret")
    other = body.replace(b'"full_name": "gitea/webhooks"', b'"full_name": "gitea/elsewhere"')
    deliver(stack, other, expect=403)
    assert record(stack, 8) is None and "gitea-elsewhere-8" not in stack.records()
    assert len(gitea.calls) == calls  # nothing was said on the pull request either


def test_a_failed_preview_keeps_its_failure_status_when_removed(stack: Stack, gitea: FakeCodeHost,
                                                               tmp_path: Path) -> None:
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/broken",
                        config={**config_for("python"), "framework": "no-such-framework"})
    deliver(stack, gitea_payload("opened", number=9, sha=repo.sha_a, clone_url=repo.clone_url, ref=repo.branch))
    wait_until(lambda: (record(stack, 9) or {}).get("status") == "failed", timeout=120, message="the deploy fails")
    wait_until(lambda: [s["state"] for s in gitea.statuses_of(OWNER, NAME, repo.sha_a)] == ["pending", "failure"],
               timeout=30, message="the failure status")
    deliver(stack, gitea_payload("closed", number=9, sha=repo.sha_a, clone_url=repo.clone_url, ref=repo.branch))
    wait_until(lambda: record(stack, 9) is None, timeout=120, message="cleanup")
    wait_until(lambda: "removed" in comment(gitea, 9).lower(), timeout=30, message="the removal in the comment")
    assert [s["state"] for s in gitea.statuses_of(OWNER, NAME, repo.sha_a)] == ["pending", "failure"]
