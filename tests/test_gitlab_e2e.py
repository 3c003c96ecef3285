"""A GitLab merge request of a project in a subgroup, end to end: the real service process, Docker, nginx and git;
only GitLab's REST API is a fake on 127.0.0.1 (tests/support/fake_codehost.py with GitLab's prefix). Deliveries
are shaped as GitLab sends them (tests/fixtures/codehost-webhooks/gitlab/)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import FIXTURE_REPO, GITLAB_SECRET, gitlab_headers, gitlab_payload
from tests.support.repos import config_for
from tests.support.stack import Stack, assert_fully_removed, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.uses("python", "postgres")]
PROJECT = "platform/web-team/shop"
OWNER, NAME = PROJECT.rsplit("/", 1)
SLUG = "platform-web-team-shop"


@pytest.fixture(scope="module")
def gitlab() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost(prefix="/api/v4").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def stack(gitlab: FakeCodeHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("gitlab-e2e"), GITLAB_URL=gitlab.url, GITLAB_TOKEN="glpat-e2e",
                          GITLAB_WEBHOOK_SECRET=GITLAB_SECRET, ALLOWED_REPOS=f"{FIXTURE_REPO},gitlab:{PROJECT}")
    yield running
    stop_stack(running)


def deliver(stack: Stack, body: bytes, expect: int = 200, token: str = GITLAB_SECRET) -> None:
    response = web.post(f"{stack.service.url}/webhook/gitlab", content=body, headers=gitlab_headers(token),
                        timeout=10)
    assert response.status_code == expect, response.text


def running(stack: Stack, iid: int, sha: str) -> bool:
    record = stack.records().get(f"{SLUG}-{iid}")
    return bool(record and record["status"] == "running" and record["commitSha"] == sha)


def note(gitlab: FakeCodeHost, iid: int) -> str:
    notes = gitlab.comments_on(OWNER, NAME, iid)
    assert len(notes) == 1, notes  # one note, edited in place
    return str(notes[0]["body"])


def test_a_merge_request_opens_updates_and_merges_its_preview(stack: Stack, gitlab: FakeCodeHost) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", "feature/gitlab", config=config_for("python"))
    deliver(stack, gitlab_payload("open", iid=5, sha=repo.sha_a, ref=repo.branch, project=PROJECT,
                                  clone_url=repo.clone_url), token="wrong", expect=401)
    assert f"{SLUG}-5" not in stack.records()
    deliver(stack, gitlab_payload("open", iid=5, sha=repo.sha_a, ref=repo.branch, project=PROJECT,
                                  clone_url=repo.clone_url))
    wait_until(lambda: running(stack, 5, repo.sha_a), timeout=420, message="the merge request's preview running")
    record = stack.records()[f"{SLUG}-5"]
    assert record["codehost"] == "gitlab" and (record["repoOwner"], record["repoName"]) == (OWNER, NAME)
    wait_until(lambda: stack.page(5, slug=SLUG).text == "python says: commit A\n", timeout=15, message="page A")
    wait_until(lambda: record["url"] in note(gitlab, 5), timeout=30, message="the URL in the note")
    wait_until(lambda: [s["state"] for s in gitlab.statuses_of(OWNER, NAME, repo.sha_a)] == ["running", "success"],
               timeout=30, message="commit statuses")
    assert {call.headers.get("PRIVATE-TOKEN") for call in gitlab.calls} == {"glpat-e2e"}

    deliver(stack, gitlab_payload("update", iid=5, sha=repo.sha_b, ref=repo.branch, project=PROJECT,
                                  clone_url=repo.clone_url, oldrev=repo.sha_a))
    wait_until(lambda: running(stack, 5, repo.sha_b), timeout=420, message="commit B running")
    wait_until(lambda: stack.page(5, slug=SLUG).text == "python says: commit B\n", timeout=15, message="page B")

    deliver(stack, gitlab_payload("merge", iid=5, sha=repo.sha_b, ref=repo.branch, project=PROJECT,
                                  clone_url=repo.clone_url))
    wait_until(lambda: f"{SLUG}-5" not in stack.records(), timeout=120, message="cleanup")
    assert_fully_removed(stack, 5, slug=SLUG)
    wait_until(lambda: "removed" in note(gitlab, 5).lower(), timeout=30, message="the removal in the note")


def test_a_delivery_without_its_token_or_of_a_project_not_allowed_records_nothing(stack: Stack) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", "feature/gitlab-refused", config=config_for("python"))
    body = gitlab_payload("open", iid=6, sha=repo.sha_a, ref=repo.branch, project=PROJECT, clone_url=repo.clone_url)
    headers = {key: value for key, value in gitlab_headers().items() if key != "X-Gitlab-Token"}
    missing = web.post(f"{stack.service.url}/webhook/gitlab", content=body, headers=headers, timeout=10)
    assert (missing.status_code, missing.json()) == (401, {"error": "Invalid signature"})
    wrong = web.post(f"{stack.service.url}/webhook/gitlab", content=body, headers=gitlab_headers("nope"),
                     timeout=10)
    assert (wrong.status_code, wrong.json()) == (401, {"error": "Invalid signature"})
    other = gitlab_payload("open", iid=6, sha=repo.sha_a, ref=repo.branch, project="platform/web-team/admin",
                           clone_url=repo.clone_url)
    refused = web.post(f"{stack.service.url}/webhook/gitlab", content=other, headers=gitlab_headers(), timeout=10)
    assert (refused.status_code, refused.json()) == (403, {"error": "Repository not in allowed list"})
    assert not any(record.endswith("-6") for record in stack.records())


def test_a_merge_request_closed_without_merging_removes_its_preview(stack: Stack, gitlab: FakeCodeHost) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", "feature/gitlab-closed", config=config_for("python"))
    deliver(stack, gitlab_payload("open", iid=7, sha=repo.sha_a, ref=repo.branch, project=PROJECT,
                                  clone_url=repo.clone_url))
    wait_until(lambda: running(stack, 7, repo.sha_a), timeout=420, message="the merge request's preview running")
    deliver(stack, gitlab_payload("close", iid=7, sha=repo.sha_a, ref=repo.branch, project=PROJECT,
                                  clone_url=repo.clone_url))
    wait_until(lambda: f"{SLUG}-7" not in stack.records(), timeout=120, message="cleanup")
    assert_fully_removed(stack, 7, slug=SLUG)
