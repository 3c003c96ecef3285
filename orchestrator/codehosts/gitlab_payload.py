"""The part of GitLab's deliveries and API answers the service reads, checked with pydantic and bounded: merge
request events (`Merge Request Hook`), notes (`Note Hook`) and the listed merge requests and projects."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from orchestrator.plugin_api.deliveries import PayloadModel, WebhookRejected


class Project(PayloadModel):
    path_with_namespace: str = Field(max_length=1000)
    git_http_url: str | None = Field(default=None, max_length=2048)


class Commit(PayloadModel):
    id: str = Field(max_length=64)


class Change(PayloadModel):
    previous: Any = None
    current: Any = None


class Changes(PayloadModel):
    draft: Change | None = None
    work_in_progress: Change | None = None
    labels: Change | None = None


class Attributes(PayloadModel):
    iid: int = Field(ge=1)
    action: str | None = Field(default=None, max_length=40)
    source_branch: str | None = Field(default=None, max_length=255)
    target_branch: str | None = Field(default=None, max_length=255)
    last_commit: Commit | None = None
    oldrev: str | None = Field(default=None, max_length=64)
    draft: bool = False
    work_in_progress: bool = False
    source: Project | None = None
    state: str = Field(default="opened", max_length=20)
    updated_at: str | None = Field(default=None, max_length=40)


class ListedProject(PayloadModel):
    """`GET /projects/{id}`: the part the listing needs."""

    id: int
    path_with_namespace: str = Field(max_length=1000)
    http_url_to_repo: str | None = Field(default=None, max_length=2048)


class ListedMergeRequest(PayloadModel):
    """An item of `GET /projects/{id}/merge_requests?state=opened`."""

    iid: int = Field(ge=1)
    sha: str | None = Field(default=None, max_length=64)
    source_branch: str | None = Field(default=None, max_length=255)
    target_branch: str | None = Field(default=None, max_length=255)
    source_project_id: int | None = None
    draft: bool = False
    work_in_progress: bool = False
    labels: Any = None  # names, read leniently
    updated_at: str | None = Field(default=None, max_length=40)
    state: str = Field(default="opened", max_length=20)


class NoteUser(PayloadModel):
    username: str = Field(max_length=255)
    id: int | None = None


class Note(PayloadModel):
    id: int | None = None
    created_at: str | None = Field(default=None, max_length=40)
    note: str = Field(default="", max_length=65536)
    noteable_type: str | None = Field(default=None, max_length=40)
    action: str | None = Field(default=None, max_length=40)  # `create`/`update` (GitLab 16+); absent before


class NoteMergeRequest(PayloadModel):
    iid: int = Field(ge=1)


class NoteDelivery(PayloadModel):
    project: Project
    object_attributes: Note
    user: NoteUser
    merge_request: NoteMergeRequest | None = None


class MergeRequestDelivery(PayloadModel):
    object_kind: str = Field(max_length=40)
    project: Project
    object_attributes: Attributes
    labels: Any = None  # read leniently (labels_of): the gating's input never refuses a delivery
    changes: Changes | None = None


def gitlab_time(value: str | None) -> datetime | None:
    """GitLab's times: ISO 8601 (`2013-12-03T17:23:34.123Z`), or `2013-12-03 17:23:34 UTC` in older versions."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace(" UTC", "+00:00").replace("Z", "+00:00"))
    except ValueError:
        raise WebhookRejected(400, "Invalid payload: object_attributes.updated_at is not a time") from None
