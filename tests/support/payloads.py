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


def push_payload(ref: str, sha: str, clone_url: str, default_branch: str, repository: str = FIXTURE_REPO) -> bytes:
    """The real `push` fixture (a tag's deletion) as a push of `sha` to `ref`."""
    data = fixture("push.tag-deleted")
    data.update(ref=ref, after=sha, deleted=False, created=False)
    data["repository"].update(clone_url=clone_url, default_branch=default_branch, full_name=repository,
                              name=repository.split("/")[1])
    return json.dumps(data).encode()


# Gitea and Forgejo ------------------------------------------------------------------------------------

GITEA_REPO = "gitea/webhooks"  # the fixture's repository
GITEA_SECRET = "gitea-webhook-secret-9d2e"


def gitea_payload(action: str = "opened", number: int = 2, sha: str | None = None, clone_url: str | None = None,
                  ref: str | None = None, merged: bool = False, title: str | None = None,
                  labels: list[str] | None = None, title_before: str | None = None, draft: bool | None = None) -> bytes:
    """The Gitea `pull_request` fixture as Gitea sends `action` (opened, reopened, synchronized, closed, edited,
    label_updated, ...), with the pull request's number, head and now as its `updated_at`."""
    data = fixture("gitea/pull_request.opened")
    pr = data["pull_request"]
    data["action"] = action
    data["number"] = pr["number"] = number
    pr["updated_at"] = datetime.now(UTC).isoformat(timespec="microseconds")
    if action == "closed":
        pr["state"], pr["merged"] = "closed", merged
    if sha:
        pr["head"]["sha"] = sha
    if ref:
        pr["head"]["ref"] = pr["head"]["label"] = ref
    if clone_url is not None:
        pr["head"]["repo"]["clone_url"] = data["repository"]["clone_url"] = clone_url
    if title is not None:
        pr["title"] = title
    if draft is not None:
        pr["draft"] = draft
    if labels is not None:
        pr["labels"] = [{"id": index + 1, "name": name} for index, name in enumerate(labels)]
    if title_before is not None:
        data["changes"] = {"title": {"from": title_before}}
    return json.dumps(data, indent=2).encode()


def gitea_headers(body: bytes, secret: str = GITEA_SECRET, forgejo: bool = False, event_type: str = "pull_request",
                  delivery: str | None = None) -> dict[str, str]:
    """The headers Gitea sends (services/webhook/deliver.go), Forgejo's too with `forgejo`: every kind of
    pull-request delivery has the event `pull_request`; the event type says which (pull_request_sync, ...)."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    delivery = delivery or str(uuid.uuid4())
    headers = {"Content-Type": "application/json", "X-Gitea-Event": "pull_request", "X-Gitea-Event-Type": event_type,
               "X-Gitea-Delivery": delivery, "X-Gitea-Signature": digest, "X-Gogs-Event": "pull_request",
               "X-Gogs-Delivery": delivery, "X-Gogs-Signature": digest, "X-GitHub-Event": "pull_request",
               "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}"}
    if forgejo:
        headers.update({"X-Forgejo-Event": "pull_request", "X-Forgejo-Event-Type": event_type,
                        "X-Forgejo-Delivery": delivery, "X-Forgejo-Signature": digest})
    return headers


# GitLab -----------------------------------------------------------------------------------------------

GITLAB_PROJECT = "gitlabhq/gitlab-test"  # the fixture's project
GITLAB_SECRET = "gitlab-webhook-token-4c1a"
GITLAB_ACTIONS = {"opened": "open", "reopened": "reopen", "closed": "close", "merged": "merge"}


def gitlab_payload(action: str = "open", iid: int = 1, sha: str | None = None, clone_url: str | None = None,
                   ref: str | None = None, project: str | None = None, oldrev: str | None = None,
                   draft: bool | None = None, labels: list[str] | None = None,
                   changes: dict[str, Any] | None = None, source: str | None = None) -> bytes:
    """The GitLab `Merge Request Hook` fixture as GitLab sends `action` (open, reopen, update, close, merge), with
    the merge request's iid, head, project (a group path), and now as its `updated_at`. `source`: the path of
    the fork the merge request comes from (its clone URL is `clone_url`)."""
    data = fixture("gitlab/merge_request.open")
    mr = data["object_attributes"]
    mr["action"], mr["iid"] = action, iid
    mr["state"] = {"close": "closed", "merge": "merged"}.get(action, "opened")
    mr["updated_at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")  # GitLab's older form
    if sha:
        mr["last_commit"]["id"] = sha
    if ref:
        mr["source_branch"] = ref
    if project:
        data["project"]["path_with_namespace"] = mr["target"]["path_with_namespace"] = project
        if source is None:
            mr["source"]["path_with_namespace"] = project
    if source is not None:
        mr["source"]["path_with_namespace"] = source
    if clone_url is not None:
        mr["source"]["git_http_url"] = data["project"]["git_http_url"] = clone_url
    if oldrev is not None:
        mr["oldrev"] = oldrev
    if draft is not None:
        mr["draft"] = mr["work_in_progress"] = draft
    if labels is not None:
        data["labels"] = mr["labels"] = [{"id": index + 1, "title": title} for index, title in enumerate(labels)]
    if changes is not None:
        data["changes"] = changes
    return json.dumps(data).encode()


def gitlab_headers(token: str = GITLAB_SECRET, delivery: str | None = None,
                   event: str = "Merge Request Hook") -> dict[str, str]:
    """The headers GitLab sends: the event, the webhook's secret token as it is, a delivery id."""
    return {"Content-Type": "application/json", "X-Gitlab-Event": event, "X-Gitlab-Token": token,
            "X-Gitlab-Event-UUID": delivery or str(uuid.uuid4()), "X-Gitlab-Instance": "https://gitlab.example.com"}


def comment_payload(number: int, body: str, user: str, repository: str = FIXTURE_REPO,
                    on_pull_request: bool = True, comment_id: int | None = None,
                    created_at: datetime | None = None) -> bytes:
    """GitHub's `issue_comment` `created` delivery (the part the service reads, shaped as GitHub sends it): a new
    comment by `user` on pull request (or issue) `number` of `repository`, written now unless `created_at`; each
    call a new comment (its id) unless `comment_id`."""
    owner, name = repository.split("/")
    issue: dict[str, Any] = {"number": number, "title": f"PR {number}", "state": "open"}
    if on_pull_request:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{repository}/pulls/{number}"}
    return json.dumps({
        "action": "created", "issue": issue,
        "comment": {"id": comment_id or uuid.uuid4().int % 2**53, "body": body,
                    "user": {"login": user, "type": "User"},
                    "created_at": (created_at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "repository": {"full_name": repository, "name": name, "owner": {"login": owner}},
        "sender": {"login": user},
    }).encode()
