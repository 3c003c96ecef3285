"""Previews of a git repository on this host, without a code host (`preview-orchestrator up`).

The request becomes the same event a pull request's `opened` would, with `source: local`: the same flow,
record, ports, route, log and limits; no comment and no deployment status. The CLI snapshots the directory
into a repository of its own and sends its path, branch and commit.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.common.naming import deployment_id, project_slug
from orchestrator.state.http_bodies import LocalPreviewRequest
from orchestrator.state.records import LOCAL_OWNER, PullRequestEvent


class LocalPreviewRefused(Exception):
    """The request cannot become a preview; the message says why."""


def local_event(request: LocalPreviewRequest) -> PullRequestEvent:
    path = Path(request.path)
    if not path.is_dir() or not ((path / "HEAD").is_file() or (path / ".git").exists()):
        raise LocalPreviewRefused(f"{request.path} is not a git repository on the service's host")
    try:
        slug = project_slug(LOCAL_OWNER, request.name)
    except ValueError as exc:
        raise LocalPreviewRefused(str(exc)) from None
    return PullRequestEvent(
        delivery_id=f"local-{uuid.uuid4()}", action="opened", deployment_id=deployment_id(slug, request.pr),
        project_slug=slug, repo_owner=LOCAL_OWNER, repo_name=request.name, pr_number=request.pr,
        branch=request.branch, commit_sha=request.sha, clone_url=str(path),
        head_repo_full_name=f"{LOCAL_OWNER}/{request.name}", received_at=datetime.now(UTC), source="local",
    )
