"""An example third-party code host plugin: "Forge", a made-up code host, written only from docs/plugins.md,
docs/codehosts.md and orchestrator/plugin_api/hookspecs.py.

Forge signs a delivery with `X-Forge-Signature: sha256=<hex HMAC-SHA256 of the body>` and sends one JSON shape
for every pull-request event: {"event": "pull_request", "action": "opened" | "pushed" | "closed",
"repository": "owner/name", "number": N, "branch": ..., "commit": ..., "clone_url": ..., "updated_at": ...}.
Its comments API has GitHub's issue-comment shape. Settings come from the environment: FORGE_WEBHOOK_SECRET (on
when set), FORGE_API_URL, FORGE_TOKEN.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from orchestrator.plugin_api import (
    ApiClient,
    ApiCodeHost,
    CodeHostSpec,
    Delivery,
    Ignored,
    PullRequestChange,
    WebhookRejected,
    find_issue_comment,
    hookimpl,
    json_object,
    signature_matches,
    upsert_issue_comment,
)

NAME = "forge"
ACTIONS = {"opened": "opened", "pushed": "synchronize", "closed": "closed"}


@hookimpl
def po_codehosts() -> list[CodeHostSpec]:
    return [CodeHostSpec(name=NAME, description="Forge, the example code host (FORGE_*)")]


@hookimpl
def po_codehost(name: str, metrics: Any) -> Forge | None:
    secret = os.environ.get("FORGE_WEBHOOK_SECRET", "")
    if name != NAME or not secret:
        return None
    url = os.environ.get("FORGE_API_URL", "http://127.0.0.1:9")
    token = os.environ.get("FORGE_TOKEN", "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Forge(ApiClient(url, headers, metrics=metrics), url, token, secret)


class Forge(ApiCodeHost):
    name = NAME
    event_header = "X-Forge-Event"
    delivery_header = "X-Forge-Delivery"

    def verify(self, delivery: Delivery) -> None:
        if not signature_matches(self.secret, delivery.body, delivery.header("X-Forge-Signature"), "sha256="):
            raise WebhookRejected(401, "Invalid signature")

    def parse(self, delivery: Delivery) -> PullRequestChange | Ignored:
        document = json_object(delivery.body)
        if document.get("event") != "pull_request":
            return Ignored("not a pull request event")
        action = ACTIONS.get(str(document.get("action")))
        if action is None:
            return Ignored(f"action {str(document.get('action'))[:40]!r} is not handled")
        repository, number = document.get("repository"), document.get("number")
        if not isinstance(repository, str) or repository.count("/") != 1 or not isinstance(number, int):
            raise WebhookRejected(400, "Invalid payload: repository (owner/name) and number are required")
        owner, name = repository.split("/")
        text = {key: str(document[key])[:2048] if document.get(key) is not None else None
                for key in ("branch", "commit", "clone_url", "updated_at")}
        try:
            updated_at = datetime.fromisoformat(text["updated_at"]) if text["updated_at"] else None
        except ValueError:
            raise WebhookRejected(400, "Invalid payload: updated_at is not an ISO 8601 time") from None
        # The service checks the names, the branch and the commit after this (400 for bad ones).
        return PullRequestChange(
            action=action, owner=owner, name=name, number=number, head_ref=text["branch"], head_sha=text["commit"],
            clone_url=text["clone_url"], head_repository=repository, base_ref=None, updated_at=updated_at)

    def upsert_comment(self, owner: str, repo: str, number: int, comment_id: int | None, body: str) -> int:
        return upsert_issue_comment(self.api, owner, repo, number, comment_id, body)

    def find_marked_comment(self, owner: str, repo: str, number: int, marker: str) -> int | None:
        return find_issue_comment(self.api, owner, repo, number, marker)
