"""A third-party code host plugin, end to end: `forge` of the example distribution (tests/example_plugin/po_forge,
written only from the docs and the hookspecs, installed by scripts/test) receives a delivery at its own path,
POST /webhook/forge, and the service deploys, comments through its API and removes the preview, through the real
service process, Docker, nginx and git. Its API is the fake on 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from orchestrator.rendering.plugin_host import build_plugin_host
from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import wait_until
from tests.support.repos import config_for
from tests.support.stack import Stack, assert_fully_removed, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.uses("python", "postgres")]
SECRET = "forge-secret-31"
SLUG = "acme-forged"


@pytest.fixture(scope="module")
def forge_api() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def stack(forge_api: FakeCodeHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if "forge" not in build_plugin_host().provided.codehosts:
        pytest.fail("the example distribution is not installed: run scripts/test (or pip install -e "
                    "tests/example_plugin)")
    root = tmp_path_factory.mktemp("forge-e2e")
    running = start_stack(root, FORGE_WEBHOOK_SECRET=SECRET, FORGE_TOKEN="forge-token-1", FORGE_API_URL=forge_api.url,
                          ALLOWED_REPOS="Codertocat/Hello-World,forge:acme/forged")
    yield running
    stop_stack(running)


def deliver(stack: Stack, action: str, repo: PullRequestRepo, sha: str, secret: str = SECRET,
            repository: str = "acme/forged") -> httpx.Response:
    body = json.dumps({"event": "pull_request", "action": action, "repository": repository, "number": 4,
                       "branch": repo.branch, "commit": sha, "clone_url": repo.clone_url,
                       "updated_at": datetime.now(UTC).isoformat()}).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return web.post(f"{stack.service.url}/webhook/forge", content=body, timeout=10, headers={
        "Content-Type": "application/json", "X-Forge-Signature": signature, "X-Forge-Delivery": str(uuid.uuid4())})


def test_a_third_party_code_host_deploys_from_its_own_path(stack: Stack, forge_api: FakeCodeHost) -> None:
    repo = make_pr_repo(stack.root / "repos", "python", "feature/forged", config=config_for("python"))
    assert deliver(stack, "opened", repo, repo.sha_a, secret="wrong").status_code == 401
    assert deliver(stack, "opened", repo, repo.sha_a, repository="acme/other").status_code == 403
    assert deliver(stack, "opened", repo, repo.sha_a).status_code == 200

    def running(sha: str) -> bool:
        record = stack.records().get(f"{SLUG}-4")
        return bool(record and record["status"] == "running" and record["commitSha"] == sha)

    wait_until(lambda: running(repo.sha_a), timeout=420, message="the forge preview running")
    record = stack.records()[f"{SLUG}-4"]
    assert record["codehost"] == "forge"
    wait_until(lambda: stack.page(4, slug=SLUG).text == "python says: commit A\n", timeout=15, message="page A")
    wait_until(lambda: any(record["url"] in c["body"] for c in forge_api.comments_on("acme", "forged", 4)),
               timeout=30, message="the URL in the forge comment")
    assert {call.headers["Authorization"] for call in forge_api.calls} == {"Bearer forge-token-1"}
    assert deliver(stack, "pushed", repo, repo.sha_b).status_code == 200
    wait_until(lambda: running(repo.sha_b), timeout=420, message="the forge preview updated")
    assert deliver(stack, "closed", repo, repo.sha_b).status_code == 200
    wait_until(lambda: f"{SLUG}-4" not in stack.records(), timeout=120, message="cleanup")
    assert_fully_removed(stack, 4, slug=SLUG)
