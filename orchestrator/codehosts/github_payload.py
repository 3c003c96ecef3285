"""GitHub's `pull_request` delivery: the spec's `GitHubWebhookPayload` (the part the service reads, checked with
pydantic) and what it says as a PullRequestChange. The event comes from `X-GitHub-Event`, or from the body's shape
when a delivery is sent without it (the spec requires only the content type and the signature)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from orchestrator.plugin_api import (
    HANDLED_ACTIONS,
    MAX_PR_NUMBER,
    SHA_PATTERN,
    PullRequestAction,
    branch_problem,
    describe_problems,
)
from orchestrator.plugin_api.codehost import CodeHostError
from orchestrator.plugin_api.deliveries import (
    ACTIONS,
    BranchPush,
    Ignored,
    PayloadModel,
    PullRequestChange,
    PullRequestComment,
    WebhookRejected,
    json_object,
    labels_of,
    validated,
)


class Owner(PayloadModel):
    login: str | None = Field(default=None, max_length=100)


class HeadRepo(PayloadModel):
    clone_url: str | None = Field(default=None, max_length=2048)
    name: str | None = Field(default=None, max_length=100)
    full_name: str | None = Field(default=None, max_length=200)
    owner: Owner | None = None


class Head(PayloadModel):
    ref: str | None = Field(default=None, description="Branch name")
    sha: str | None = Field(default=None, description="Commit SHA")
    repo: HeadRepo | None = None

    @field_validator("ref")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and (problem := branch_problem(value)):
            raise ValueError(f"branch name {problem}")
        return value

    @field_validator("sha")
    @classmethod
    def _sha(cls, value: str | None) -> str | None:
        if value is not None and not SHA_PATTERN.match(value):
            raise ValueError("must be a 40 or 64 character lowercase hex commit SHA")
        return value


class Base(PayloadModel):
    ref: str | None = Field(default=None, max_length=255)


class PullRequest(PayloadModel):
    number: int = Field(ge=1, le=MAX_PR_NUMBER)
    head: Head
    base: Base
    updated_at: datetime | None = Field(default=None, description="When the pull request last changed")


class Repository(PayloadModel):
    full_name: str = Field(max_length=200, description="Form owner/repo")
    name: str = Field(max_length=100)
    owner: Owner
    clone_url: str | None = Field(default=None, max_length=2048)


class WebhookPayload(PayloadModel):
    """The spec's `GitHubWebhookPayload`: the part of a `pull_request` event the service reads."""

    model_config = ConfigDict(extra="ignore", title="GitHubWebhookPayload")

    action: PullRequestAction
    pull_request: PullRequest
    repository: Repository


def parse_pull_request(body: bytes, event_type: str | None) -> (PullRequestChange | PullRequestComment | BranchPush |
                                                                Ignored):
    """A verified delivery's body: its pull-request change, or why it is ignored; WebhookRejected(400) for a
    body that is not what GitHub sends."""
    document = json_object(body)
    event_type = event_type or _event_of(document)
    if event_type == "ping":
        return Ignored("ping")
    if event_type == "issue_comment":
        return comment_of(document)
    if event_type == "push":
        return push_of(document)
    if event_type != "pull_request":
        return Ignored(f"event {event_type or '(none)'} is not handled")
    action = document.get("action")
    if not isinstance(action, str):
        raise WebhookRejected(400, "Invalid payload: action is required and must be a string")
    if action not in ACTIONS:
        return Ignored(f"pull_request action {action[:40]!r} is not handled")
    try:
        # The gated actions (labeled, ready_for_review, ...) are checked as the deploy they may become.
        checked_as = action if action in HANDLED_ACTIONS else "opened"
        payload = WebhookPayload.model_validate({**document, "action": checked_as})
    except ValidationError as exc:
        raise WebhookRejected(400, "Invalid payload: " + describe_problems(exc)) from None
    pr, repository = payload.pull_request, payload.repository
    owner, _, name = repository.full_name.partition("/")
    head_repo = pr.head.repo
    return PullRequestChange(
        action=action, owner=owner, name=name, number=pr.number, head_ref=pr.head.ref, head_sha=pr.head.sha,
        clone_url=(head_repo.clone_url if head_repo else None) or repository.clone_url,
        head_repository=head_repo.full_name if head_repo else None, base_ref=pr.base.ref,
        updated_at=pr.updated_at, **gating_facts(document))


class ListedRepository(PayloadModel):
    full_name: str = Field(max_length=200, pattern=r"^[^/]+/[^/]+$")
    clone_url: str | None = Field(default=None, max_length=2048)


class ListedBase(Base):
    repo: ListedRepository


class ListedPullRequest(PullRequest):
    """An item of `GET /repos/{owner}/{repo}/pulls`: a pull request as a delivery carries it, its base's
    repository inside."""

    base: ListedBase


def listed_pull_request(item: Any) -> PullRequestChange:
    """One open pull request of a listing as the `opened` change a delivery would have said; CodeHostError for an
    item that is not what GitHub lists (the whole listing is then not used)."""
    try:
        pr = ListedPullRequest.model_validate(item)
    except ValidationError as exc:
        raise CodeHostError("the open pull requests' listing: " + describe_problems(exc)) from None
    owner, _, name = pr.base.repo.full_name.partition("/")
    head_repo = pr.head.repo
    return PullRequestChange(
        action="opened", owner=owner, name=name, number=pr.number, head_ref=pr.head.ref, head_sha=pr.head.sha,
        clone_url=(head_repo.clone_url if head_repo else None) or pr.base.repo.clone_url,
        head_repository=head_repo.full_name if head_repo else None, base_ref=pr.base.ref,
        updated_at=pr.updated_at, **gating_facts({"pull_request": item}))


class CommentUser(PayloadModel):
    login: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # it goes into an API path
    type: str | None = Field(default=None, max_length=40)


class Comment(PayloadModel):
    id: int | None = None
    body: str = Field(default="", max_length=65536)
    user: CommentUser
    created_at: datetime | None = None


class Issue(PayloadModel):
    number: int = Field(ge=1, le=MAX_PR_NUMBER)
    pull_request: dict[str, Any] | None = None  # present when the issue is a pull request


class CommentPayload(PayloadModel):
    action: str = Field(max_length=40)
    issue: Issue
    comment: Comment
    repository: Repository


def comment_of(document: dict[str, Any]) -> PullRequestComment | Ignored:
    """An `issue_comment` delivery: a new comment on a pull request, or why it is ignored."""
    if document.get("action") != "created":
        return Ignored(f"issue_comment action {str(document.get('action'))[:40]!r} is not handled")
    payload = validated(CommentPayload, document)
    if payload.issue.pull_request is None:
        return Ignored("a comment on an issue, not on a pull request")
    if payload.comment.user.type == "Bot":
        return Ignored("a comment written by a bot")
    owner, _, name = payload.repository.full_name.partition("/")
    return PullRequestComment(owner=owner, name=name, number=payload.issue.number,
                              author=payload.comment.user.login, body=payload.comment.body,
                              comment_id=payload.comment.id, created_at=payload.comment.created_at)


def gating_facts(document: dict[str, Any]) -> dict[str, Any]:
    """What the gating reads (PREVIEW_DRAFTS, PREVIEW_LABEL), leniently: a shape GitHub does not send counts as
    absent (not a draft, no label) rather than refusing the delivery."""
    pr = document.get("pull_request") if isinstance(document.get("pull_request"), dict) else {}
    names = labels_of(pr.get("labels"), "name")
    label = document.get("label")
    changed = label.get("name") if isinstance(label, dict) and isinstance(label.get("name"), str) else None
    return {"draft": pr.get("draft") is True, "labels": names, "changed_label": changed,
            "open": pr.get("state") != "closed"}


def _event_of(document: dict[str, Any]) -> str | None:
    """The event of a signed delivery sent without X-GitHub-Event: what the body's shape says it is."""
    if isinstance(document.get("pull_request"), dict) and "action" in document:
        return "pull_request"
    if "zen" in document and "hook_id" in document:
        return "ping"
    if "ref" in document and "after" in document and "pusher" in document:
        return "push"
    return None


class PushRepository(PayloadModel):
    full_name: str = Field(max_length=200, pattern=r"^[^/]+/[^/]+$")
    default_branch: str | None = Field(default=None, max_length=255)
    clone_url: str | None = Field(default=None, max_length=2048)
    pushed_at: int | None = Field(default=None, ge=0, le=2**40)  # epoch seconds in a push (an ISO time elsewhere)


class PushPayload(PayloadModel):
    """`push`: the ref, its new head (`after`: zeros when `deleted`), the repository's default branch."""

    ref: str = Field(max_length=300)
    after: str | None = Field(default=None, max_length=64)
    deleted: bool = False
    repository: PushRepository


def push_of(document: dict[str, Any]) -> BranchPush:
    payload = validated(PushPayload, document)
    owner, _, name = payload.repository.full_name.partition("/")
    return BranchPush(owner=owner, name=name, ref=payload.ref, sha=payload.after,
                      default_branch=payload.repository.default_branch, clone_url=payload.repository.clone_url,
                      deleted=payload.deleted or set(payload.after or "0") == {"0"},
                      pushed_at=None if payload.repository.pushed_at is None
                      else datetime.fromtimestamp(payload.repository.pushed_at, UTC))
