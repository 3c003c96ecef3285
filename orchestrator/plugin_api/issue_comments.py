"""GitHub's issue-comments endpoints, which Gitea and Forgejo share: the pull request's one comment of the service,
written and found again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.plugin_api.api_client import ApiClient


def upsert_issue_comment(api: ApiClient, owner: str, repo: str, number: int, comment_id: int | None,
                         body: str, headers: Mapping[str, str] | None = None) -> int:
    """Edit comment `comment_id` (`PATCH /repos/{owner}/{repo}/issues/comments/{id}`), or create one on the pull
    request (`POST …/issues/{number}/comments`) when it is None or was deleted; returns its id. `headers`: added
    to the client's (a GitHub App's installation token)."""
    extra = dict(headers or {})
    if comment_id is not None:
        response = api.request("comment", "PATCH", f"/repos/{owner}/{repo}/issues/comments/{comment_id}",
                               json={"body": body}, headers=extra)
        if response.status_code != 404:
            api.check(response)
            return comment_id
    response = api.request("comment", "POST", f"/repos/{owner}/{repo}/issues/{number}/comments", json={"body": body},
                           headers=extra)
    return int(api.check(response).json()["id"])


def find_issue_comment(api: ApiClient, owner: str, repo: str, number: int, marker: str,
                       params: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None) -> int | None:
    """The newest comment of `GET …/issues/{number}/comments` (with `params`, e.g. a page size) whose body holds
    `marker`."""
    response = api.request("comment", "GET", f"/repos/{owner}/{repo}/issues/{number}/comments",
                           params=dict(params or {}), headers=dict(headers or {}))
    marked = [item["id"] for item in api.check(response).json() if marker in str(item.get("body", ""))]
    return int(marked[-1]) if marked else None
