"""Pushes as Gitea/Forgejo (`push`) and GitLab (`Push Hook`) send them, read as BranchPush: a base preview
(BASE_PREVIEWS) follows its repository's default branch. Written from the hosts' own definitions: Gitea's
`PushPayload` (modules/structs/hook.go: ref, before, after, repository with full_name, clone_url, default_branch;
a deleted branch is a `delete` event, not a push), GitLab's push event (docs.gitlab.com, "Webhook events", "Push
events": object_kind push, ref, after, checkout_sha — null, and after all zeros, for a deleted branch —, project
with path_with_namespace, git_http_url, default_branch)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.plugin_api.deliveries import BranchPush, PayloadModel, WebhookRejected, validated

REF = Field(max_length=300)
SHA = Field(default=None, max_length=64)


class GiteaPushRepository(PayloadModel):
    full_name: str = Field(max_length=200, pattern=r"^[^/]+/[^/]+$")
    clone_url: str | None = Field(default=None, max_length=2048)
    default_branch: str | None = Field(default=None, max_length=255)


class GiteaPush(PayloadModel):
    ref: str = REF
    after: str | None = SHA
    repository: GiteaPushRepository


class GitLabPushProject(PayloadModel):
    path_with_namespace: str = Field(max_length=1000, pattern=r"^[^/]+(?:/[^/]+)+$")
    git_http_url: str | None = Field(default=None, max_length=2048)
    default_branch: str | None = Field(default=None, max_length=255)


class GitLabPush(PayloadModel):
    object_kind: str = Field(max_length=40)
    ref: str = REF
    after: str | None = SHA
    checkout_sha: str | None = SHA
    project: GitLabPushProject


def gitea_push(document: dict[str, Any]) -> BranchPush:
    payload = validated(GiteaPush, document)
    owner, _, name = payload.repository.full_name.partition("/")
    return BranchPush(owner=owner, name=name, ref=payload.ref, sha=payload.after,
                      default_branch=payload.repository.default_branch, clone_url=payload.repository.clone_url,
                      deleted=set(payload.after or "0") == {"0"})


def gitlab_push(document: dict[str, Any]) -> BranchPush:
    payload = validated(GitLabPush, document)
    if payload.object_kind != "push":
        raise WebhookRejected(400, f"Invalid payload: a Push Hook of object_kind {payload.object_kind[:40]!r}")
    owner, _, name = payload.project.path_with_namespace.rpartition("/")
    return BranchPush(owner=owner, name=name, ref=payload.ref, sha=payload.checkout_sha or payload.after,
                      default_branch=payload.project.default_branch, clone_url=payload.project.git_http_url,
                      deleted=payload.checkout_sha is None or set(payload.after or "0") == {"0"})
