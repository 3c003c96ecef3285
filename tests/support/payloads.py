"""Real GitHub payloads (tests/fixtures/codehost-webhooks, from octokit/webhooks, MIT), signed the way GitHub
signs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "codehost-webhooks"
SECRET = "test-webhook-secret-5f1c"
FIXTURE_REPO = "Codertocat/Hello-World"
FIXTURE_DEPLOYMENT = "codertocat-hello-world-2"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_headers(
    body: bytes, event: str = "pull_request", delivery: str | None = None, secret: str = SECRET
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
    }


def pr_payload(action: str = "opened", number: int = 2, sha: str | None = None, clone_url: str | None = None,
               repository: str | None = None, **head: Any) -> bytes:
    """The real `pull_request.<action>` fixture with a chosen number, SHA, head fields or repository
    (`owner/name`, set on the base and the head). Its `updated_at` is now, as the code host's moves with every
    change of the pull request (an older one than the last accepted makes an event stale: events/inbox.py)."""
    name = {"reopened": "pull_request.reopened", "synchronize": "pull_request.synchronize",
            "closed": "pull_request.closed"}.get(action, "pull_request.opened")
    data = fixture(name)
    data["action"] = action
    data["number"] = number
    data["pull_request"]["number"] = number
    data["pull_request"]["updated_at"] = datetime.now(UTC).isoformat(timespec="microseconds")
    if sha:
        data["pull_request"]["head"]["sha"] = sha
    data["pull_request"]["head"].update(head)
    if clone_url is not None:
        data["pull_request"]["head"]["repo"]["clone_url"] = clone_url
    if repository is not None:
        owner, name = repository.split("/")
        for repo in (data["repository"], data["pull_request"]["head"]["repo"]):
            repo.update(full_name=repository, name=name)
            repo["owner"]["login"] = owner
    return json.dumps(data).encode()
