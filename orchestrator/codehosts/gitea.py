"""The `gitea` code host: Gitea and Forgejo (docs/codehosts.md).

On when GITEA_WEBHOOK_SECRET is set. Deliveries come to `POST /webhook/gitea`, the event in `X-Gitea-Event`
(Forgejo: `X-Forgejo-Event`, beside Gitea's), signed in `X-Gitea-Signature` / `X-Forgejo-Signature`: the hex
HMAC-SHA256 of the raw body, without a prefix. Every pull-request delivery has the event `pull_request`; its
`action` says what happened: `opened`, `reopened`, `synchronized` (new commits), `closed` (merged or not),
`edited` (a title that gained or lost its WIP prefix is a draft change), `label_updated`/`label_cleared`.

The API is GITEA_URL/api/v1 with GITEA_TOKEN (`Authorization: token …`): the pull request's one comment through
the issue-comments API, created then edited, and a commit status (context `preview-orchestrator`) on the head
commit: pending while it builds, success with the preview's URL, failure; a removal leaves it as it is.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
from pydantic import Field, ValidationError
from pydantic_settings import SettingsConfigDict

from orchestrator.codehosts.push_payloads import gitea_push
from orchestrator.plugin_api import Check, Metrics, ServerHostSettings, describe_problems, hookimpl, read_own_settings
from orchestrator.plugin_api.codehost import (
    ApiClient,
    ApiCodeHost,
    CodeHostError,
    CodeHostSpec,
    unreadable_item,
)
from orchestrator.plugin_api.deliveries import (
    BranchPush,
    Delivery,
    Ignored,
    PayloadModel,
    PullRequestChange,
    PullRequestComment,
    WebhookRejected,
    json_object,
    labels_of,
    signature_matches,
    validated,
)
from orchestrator.plugin_api.issue_comments import find_issue_comment, upsert_issue_comment

NAME = "gitea"
CONTEXT = "preview-orchestrator"
# Gitea's default WORK_IN_PROGRESS_PREFIXES, compared ignoring case; Gitea 1.22+ also sends `draft`.
WIP_PREFIXES = ("wip:", "[wip]")
# The service's states as commit statuses (pending, success, error, failure, warning). `inactive` (the preview is
# gone) has none: a status stays as it was, never turning a failure into a success.
COMMIT_STATES = {"in_progress": "pending", "success": "success", "failure": "failure"}
ACTIONS = {"opened": "opened", "reopened": "reopened", "synchronized": "synchronize", "closed": "closed",
           "label_updated": "labels_changed", "label_cleared": "labels_changed"}


@hookimpl(trylast=True)
def po_codehosts() -> list[CodeHostSpec]:
    return [CodeHostSpec(name=NAME, description="Gitea and Forgejo (GITEA_URL, GITEA_TOKEN, GITEA_WEBHOOK_SECRET)")]


class GiteaSettings(ServerHostSettings):
    """GITEA_URL, GITEA_TOKEN, GITEA_WEBHOOK_SECRET (docs/codehosts.md): on when the secret is set."""

    model_config = SettingsConfigDict(env_prefix="GITEA_")


@hookimpl(trylast=True)
def po_codehost(name: str, settings: Any, metrics: Metrics) -> Gitea | None:
    if name != NAME:
        return None
    own = read_own_settings(GiteaSettings)
    if not own.on or own.url is None:
        return None
    token = own.token.get_secret_value()
    headers = {"Accept": "application/json", **({"Authorization": f"token {token}"} if token else {})}
    api = ApiClient(f"{own.url}/api/v1", headers, retry_base=settings.codehost_retry_base_seconds, metrics=metrics)
    return Gitea(api, own.url, token, own.webhook_secret.get_secret_value())


# The part of a delivery the service reads, bounded ------------------------------------------------------


class _Repo(PayloadModel):
    full_name: str = Field(max_length=200)
    clone_url: str | None = Field(default=None, max_length=2048)


class _Branch(PayloadModel):
    ref: str | None = Field(default=None, max_length=255)
    sha: str | None = Field(default=None, max_length=64)
    repo: _Repo | None = None


class _PullRequest(PayloadModel):
    number: int = Field(ge=1)
    state: str = Field(default="open", max_length=20)
    # What only the gating reads is read leniently (labels_of, _wip): a shape Gitea does not send never refuses a
    # delivery, least of all a `closed` one.
    title: Any = ""
    draft: bool = False
    labels: Any = None
    head: _Branch
    base: _Branch
    updated_at: datetime | None = None


class _Title(PayloadModel):
    # `changes.title.from` of an `edited` delivery
    from_: Any = Field(default="", alias="from")


class _Changes(PayloadModel):
    title: _Title | None = None


class _Delivery(PayloadModel):
    action: str = Field(max_length=40)
    pull_request: _PullRequest
    repository: _Repo
    changes: _Changes | None = None


class _User(PayloadModel):
    login: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # it goes into an API path


class _Comment(PayloadModel):
    id: int | None = None
    body: str = Field(default="", max_length=65536)
    user: _User
    created_at: datetime | None = None


class _Issue(PayloadModel):
    number: int = Field(ge=1)
    pull_request: Any = None


class _CommentDelivery(PayloadModel):
    action: str = Field(max_length=40)
    is_pull: bool = False
    issue: _Issue
    comment: _Comment
    repository: _Repo


def _wip(title: Any) -> bool:
    return str(title)[:1000].strip().lower().startswith(WIP_PREFIXES)


def _change(action: str, pr: _PullRequest, repository: _Repo) -> PullRequestChange:
    """A pull request of `repository` (a delivery's or a listing's) in the service's words."""
    owner, _, name = repository.full_name.partition("/")
    head_repo = pr.head.repo
    # An AGit pull request (pushed to refs/for/… without a fork) names the base repository as its head and a pull
    # ref as its branch: its author need not be able to push there, so it counts as a fork's.
    agit = (pr.head.ref or "").startswith("refs/")
    return PullRequestChange(
        action=action, owner=owner, name=name, number=pr.number, head_ref=pr.head.ref, head_sha=pr.head.sha,
        clone_url=(head_repo.clone_url if head_repo else None) or repository.clone_url,
        head_repository=head_repo.full_name if head_repo and not agit else None, base_ref=pr.base.ref,
        updated_at=pr.updated_at, draft=pr.draft or _wip(pr.title), labels=labels_of(pr.labels, "name"),
        open=pr.state == "open")


class Gitea(ApiCodeHost):
    name = NAME
    event_header = "X-Gitea-Event"
    delivery_header = "X-Gitea-Delivery"
    registration = ("add a webhook with URL {url}, content type application/json, GITEA_WEBHOOK_SECRET, and the "
                    "pull request events (Push too for BASE_PREVIEWS; docs/codehosts.md)")

    # Deliveries -----------------------------------------------------------------------------------------

    def event_name(self, delivery: Delivery) -> str | None:
        return delivery.header("X-Forgejo-Event") or delivery.header("X-Gitea-Event")

    def delivery_id(self, delivery: Delivery) -> str | None:
        return delivery.header("X-Forgejo-Delivery") or delivery.header("X-Gitea-Delivery")

    def verify(self, delivery: Delivery) -> None:
        given = [delivery.header(name) for name in ("X-Forgejo-Signature", "X-Gitea-Signature")]
        if not any(signature_matches(self.secret, delivery.body, value) for value in given if value):
            raise WebhookRejected(401, "Invalid signature")

    def parse(self, delivery: Delivery) -> PullRequestChange | PullRequestComment | BranchPush | Ignored:
        event = self.event_name(delivery)
        if event in ("issue_comment", "pull_request_comment"):
            return self._comment(delivery)
        if event == "push":  # a base preview's default branch (BASE_PREVIEWS)
            return gitea_push(json_object(delivery.body))
        if event != "pull_request":
            return Ignored(f"event {(event or '(none)')[:40]} is not handled")
        document = json_object(delivery.body)
        payload = validated(_Delivery, document)
        pr = payload.pull_request
        draft = pr.draft or _wip(pr.title)
        action = ACTIONS.get(payload.action)
        if payload.action == "edited":
            before = payload.changes.title.from_ if payload.changes and payload.changes.title else None
            was_draft = _wip(before) if before is not None else draft
            action = ("ready_for_review" if was_draft and not draft
                      else "converted_to_draft" if draft and not was_draft else None)
        if action is None:
            return Ignored(f"pull_request action {payload.action!r} is not handled")
        return _change(action, pr, payload.repository)

    @staticmethod
    def _comment(delivery: Delivery) -> PullRequestComment | Ignored:
        """A comment's delivery (`issue_comment`; a pull request's has `is_pull`)."""
        payload = validated(_CommentDelivery, json_object(delivery.body))
        if payload.action != "created":
            return Ignored(f"issue_comment action {payload.action!r} is not handled")
        if not payload.is_pull and payload.issue.pull_request is None:
            return Ignored("a comment on an issue, not on a pull request")
        owner, _, name = payload.repository.full_name.partition("/")
        return PullRequestComment(owner=owner, name=name, number=payload.issue.number,
                                  author=payload.comment.user.login, body=payload.comment.body,
                                  comment_id=payload.comment.id, created_at=payload.comment.created_at)

    # The API --------------------------------------------------------------------------------------------

    def can_write(self, owner: str, repo: str, author: str, author_id: int | None) -> bool:
        """`GET /repos/{owner}/{repo}/collaborators/{user}/permission`: owner, admin or write."""
        response = self.api.request("permission", "GET", f"/repos/{owner}/{repo}/collaborators/{author}/permission")
        if response.status_code == 404:  # not a collaborator
            return False
        if response.status_code == 403:
            raise CodeHostError("GITEA_TOKEN may not read collaborators' permissions: /preview commands need a "
                                "token of a user who administers the repository")
        return str(self.api.check(response).json().get("permission")) in ("owner", "admin", "write")

    def pull_request(self, owner: str, repo: str, number: int) -> PullRequestChange | None:
        return self._listed(self.api.check(self.api.request("pull", "GET", f"/repos/{owner}/{repo}/pulls/{number}"))
                            .json())

    def open_pull_requests(self, owner: str, repo: str) -> list[PullRequestChange]:
        """`GET /repos/{owner}/{repo}/pulls?state=open`, 50 a page (Gitea's default maximum)."""
        changes = []
        for item in self.api.paged("pulls", f"/repos/{owner}/{repo}/pulls", {"state": "open", "limit": 50}):
            try:
                changes.append(self._listed(item))
            except CodeHostError as exc:
                changes.append(unreadable_item(owner, repo, item, str(exc)))
        return changes

    @staticmethod
    def _listed(item: Any) -> PullRequestChange:
        """A pull request as the API gives it (its base repository inside) as an `opened` change."""
        try:
            pr = _PullRequest.model_validate(item)
        except ValidationError as exc:
            raise CodeHostError("the pull request as listed: " + describe_problems(exc)) from None
        if pr.base.repo is None:
            raise CodeHostError(f"the pull request as listed: #{pr.number} has no base repository")
        return _change("opened", pr, pr.base.repo)

    def upsert_comment(self, owner: str, repo: str, number: int, comment_id: int | None, body: str) -> int:
        return upsert_issue_comment(self.api, owner, repo, number, comment_id, body)

    def find_marked_comment(self, owner: str, repo: str, number: int, marker: str) -> int | None:
        """Gitea lists every comment of the pull request at once."""
        return find_issue_comment(self.api, owner, repo, number, marker)

    def set_status(self, owner: str, repo: str, sha: str | None, deployment: int | None, state: str,
                   description: str, url: str | None = None) -> None:
        if not sha or state not in COMMIT_STATES:
            return
        body: dict[str, Any] = {"state": COMMIT_STATES[state], "context": CONTEXT, "description": description[:140]}
        if url and state == "success":
            body["target_url"] = url
        self.api.check(self.api.request("commit_status", "POST", f"/repos/{owner}/{repo}/statuses/{sha}",
                                        json=body))

    def checks(self) -> list[Check]:
        name = f"Gitea API reachable ({self.url}, GITEA_URL)"
        try:
            response = self.api.once("version", "GET", "/version")
        except httpx.HTTPError as exc:
            return [Check(name, False, type(exc).__name__, "check the network, or GITEA_URL")]
        if response.status_code != 200:
            return [Check(name, False, f"HTTP {response.status_code}",
                          "check GITEA_URL (the server's address, without /api/v1)")]
        version = str(response.json().get("version", "?"))[:40]
        if not self.token:
            return [Check(name, False, f"version {version}; no GITEA_TOKEN: comments cannot be posted",
                          "set GITEA_TOKEN (a token with write:issue and write:repository)")]
        user = self.api.once("user", "GET", "/user")
        if user.status_code != 200:
            return [Check(name, False, f"version {version}; the token was refused ({user.status_code})",
                          "set a valid GITEA_TOKEN")]
        return [Check(name, True, f"version {version}; token of {str(user.json().get('login', '?'))[:100]}")]
