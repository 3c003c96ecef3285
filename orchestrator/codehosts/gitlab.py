"""The `gitlab` code host: GitLab.com and self-managed GitLab (docs/codehosts.md).

On when GITLAB_WEBHOOK_SECRET is set. Deliveries come to `POST /webhook/gitlab` with `X-Gitlab-Event: Merge
Request Hook`; GitLab does not sign the body, it sends the webhook's secret token in `X-Gitlab-Token`, compared in
constant time. A merge request is `object_attributes.iid` of the project `project.path_with_namespace` (a group
path: `group/subgroup/project`); `action` `open`/`reopen` deploy, `update` redeploys only when code changed
(`oldrev` is present), and otherwise matters only for a draft change or, with PREVIEW_LABEL, a label change;
`close`/`merge` remove the preview. A fork's merge request is cloned from its source project.

The API is GITLAB_URL/api/v4 with GITLAB_TOKEN (`PRIVATE-TOKEN`): the merge request's one note (created, then
`PUT`), and a commit status `preview-orchestrator` on the head commit (running, success with the URL, failed).
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from orchestrator.codehosts.gitlab_payload import (
    Attributes,
    Changes,
    ListedMergeRequest,
    ListedProject,
    MergeRequestDelivery,
    NoteDelivery,
    gitlab_time,
)
from orchestrator.codehosts.push_payloads import gitlab_push
from orchestrator.plugin_api import Check, Metrics, ServerHostSettings, describe_problems, hookimpl, read_own_settings
from orchestrator.plugin_api.codehost import ApiClient, ApiCodeHost, CodeHostError, CodeHostSpec, unreadable_item
from orchestrator.plugin_api.deliveries import (
    BranchPush,
    Delivery,
    Ignored,
    PullRequestChange,
    PullRequestComment,
    WebhookRejected,
    json_object,
    labels_of,
    validated,
)

NAME = "gitlab"
EVENT = "Merge Request Hook"
NOTE_EVENT = "Note Hook"
PUSH_EVENT = "Push Hook"
DEVELOPER = 30  # the access level that may push (Developer, Maintainer 40, Owner 50)
CONTEXT = "preview-orchestrator"
# GitLab's commit status states (pending, running, success, failed, canceled) for the service's. A status cannot
# go back from success, so the removal of a preview leaves it as it is (`inactive`: nothing is sent).
COMMIT_STATES = {"in_progress": "running", "success": "success", "failure": "failed"}
ACTIONS = {"open": "opened", "reopen": "reopened", "close": "closed", "merge": "closed"}


@hookimpl(trylast=True)
def po_codehosts() -> list[CodeHostSpec]:
    return [CodeHostSpec(name=NAME, description="GitLab (GITLAB_URL, GITLAB_TOKEN, GITLAB_WEBHOOK_SECRET)")]


class GitLabSettings(ServerHostSettings):
    """GITLAB_URL (the API under /api/v4), GITLAB_TOKEN, GITLAB_WEBHOOK_SECRET (docs/codehosts.md): on when the
    secret is set."""

    model_config = SettingsConfigDict(env_prefix="GITLAB_")


@hookimpl(trylast=True)
def po_codehost(name: str, settings: Any, metrics: Metrics) -> GitLab | None:
    if name != NAME:
        return None
    own = read_own_settings(GitLabSettings)
    if not own.on or own.url is None:
        return None
    token = own.token.get_secret_value()
    api = ApiClient(f"{own.url}/api/v4", {"PRIVATE-TOKEN": token} if token else {},
                    retry_base=settings.codehost_retry_base_seconds, metrics=metrics)
    return GitLab(api, own.url, token, own.webhook_secret.get_secret_value())


class GitLab(ApiCodeHost):
    name = NAME
    event_header = "X-Gitlab-Event"
    delivery_header = "X-Gitlab-Event-UUID"
    registration = ("add a webhook with URL {url}, the secret token GITLAB_WEBHOOK_SECRET, and merge request "
                    "events (Push events too for BASE_PREVIEWS; docs/codehosts.md)")

    # Deliveries -----------------------------------------------------------------------------------------

    def verify(self, delivery: Delivery) -> None:
        given = (delivery.header("X-Gitlab-Token") or "").encode("utf-8", "replace")
        if not given or not hmac.compare_digest(given, self.secret):
            raise WebhookRejected(401, "Invalid signature")

    def parse(self, delivery: Delivery) -> PullRequestChange | PullRequestComment | BranchPush | Ignored:
        event = delivery.header(self.event_header)
        if event == NOTE_EVENT:
            return self._note(delivery)
        if event == PUSH_EVENT:  # a base preview's default branch (BASE_PREVIEWS)
            return gitlab_push(json_object(delivery.body))
        if event != EVENT:
            return Ignored(f"event {(event or '(none)')[:40]} is not handled")
        payload = validated(MergeRequestDelivery, json_object(delivery.body))
        if payload.object_kind != "merge_request":
            return Ignored(f"object_kind {payload.object_kind!r} is not handled")
        mr = payload.object_attributes
        draft = mr.draft or mr.work_in_progress
        action = ACTIONS.get(mr.action or "")
        if mr.action == "update":
            action = self._update(mr, payload.changes, draft)
        if action is None:
            return Ignored(f"merge request action {mr.action!r} is not handled")
        owner, _, name = payload.project.path_with_namespace.rpartition("/")
        source = mr.source  # a fork's project for a fork; None when it was deleted
        return PullRequestChange(
            action=action, owner=owner, name=name, number=mr.iid, head_ref=mr.source_branch,
            head_sha=mr.last_commit.id if mr.last_commit else None,
            clone_url=(source.git_http_url if source else None) or payload.project.git_http_url,
            head_repository=source.path_with_namespace if source else None, base_ref=mr.target_branch,
            updated_at=gitlab_time(mr.updated_at), draft=draft, labels=labels_of(payload.labels, "title"),
            open=mr.state == "opened")

    @staticmethod
    def _note(delivery: Delivery) -> PullRequestComment | Ignored:
        """A `Note Hook`: a comment on a merge request, or why it is ignored."""
        payload = validated(NoteDelivery, json_object(delivery.body))
        note = payload.object_attributes
        if note.noteable_type != "MergeRequest" or payload.merge_request is None:
            return Ignored(f"a note on a {str(note.noteable_type)[:40]}, not on a merge request")
        if note.action not in (None, "create"):
            return Ignored(f"note action {note.action!r} is not handled")
        owner, _, name = payload.project.path_with_namespace.rpartition("/")
        return PullRequestComment(owner=owner, name=name, number=payload.merge_request.iid,
                                  author=payload.user.username, body=note.note, author_id=payload.user.id,
                                  comment_id=note.id, created_at=gitlab_time(note.created_at))

    @staticmethod
    def _update(mr: Attributes, changes: Changes | None, draft: bool) -> str | None:
        """An `update`: new commits (`oldrev`), else a draft change, else a label change, else nothing to do."""
        if mr.oldrev:
            return "synchronize"
        change = changes.draft or changes.work_in_progress if changes else None
        if change is not None and bool(change.previous) != bool(change.current):
            return "converted_to_draft" if draft else "ready_for_review"
        if changes is not None and changes.labels is not None:
            return "labels_changed"
        return None

    # The API --------------------------------------------------------------------------------------------

    @staticmethod
    def _project(owner: str, repo: str) -> str:
        return quote(f"{owner}/{repo}", safe="")

    def can_write(self, owner: str, repo: str, author: str, author_id: int | None) -> bool:
        """`GET /projects/{path}/members/all/{user id}` (inherited members too): Developer or more."""
        if author_id is None:
            return False
        response = self.api.request("permission", "GET",
                                    f"/projects/{self._project(owner, repo)}/members/all/{author_id}")
        if response.status_code == 404:
            return False
        access = self.api.check(response).json().get("access_level")
        return isinstance(access, int) and access >= DEVELOPER

    def pull_request(self, owner: str, repo: str, number: int) -> PullRequestChange | None:
        """`GET /projects/{path}/merge_requests/{iid}`, with the projects for the clone URL."""
        return next(iter(self._merge_requests(owner, repo, f"/merge_requests/{number}")), None)

    def clone_url(self, owner: str, repo: str) -> str | None:
        """The project's `http_url_to_repo`."""
        project = self._project_info(self._project(owner, repo))
        return project.http_url_to_repo if project else None

    def open_pull_requests(self, owner: str, repo: str) -> list[PullRequestChange]:
        """`GET /projects/{path}/merge_requests?state=opened`, 100 a page; the project itself (and a fork's source
        project) for the clone URLs, which the listing does not carry."""
        return self._merge_requests(owner, repo, "/merge_requests")

    def _merge_requests(self, owner: str, repo: str, path: str) -> list[PullRequestChange]:
        """The open merge requests (`path` /merge_requests), or the one of `path` /merge_requests/{iid}."""
        project = self._project_info(self._project(owner, repo))
        if project is None:
            raise CodeHostError(f"project {owner}/{repo} not found")
        base_owner, _, name = project.path_with_namespace.rpartition("/")
        sources: dict[int, ListedProject | None] = {project.id: project}
        changes = []
        if path == "/merge_requests":
            items = self.api.paged("merge_requests", f"/projects/{project.id}{path}",
                                   {"state": "opened", "per_page": 100})
        else:
            items = [self.api.check(self.api.request("merge_request", "GET", f"/projects/{project.id}{path}")).json()]
        for item in items:
            try:
                mr = ListedMergeRequest.model_validate(item)
                updated = gitlab_time(mr.updated_at)
            except (ValidationError, WebhookRejected) as exc:
                problem = describe_problems(exc) if isinstance(exc, ValidationError) else exc.message
                changes.append(unreadable_item(base_owner, name, item, problem))
                continue
            source_id = mr.source_project_id if mr.source_project_id is not None else project.id
            if source_id not in sources:
                sources[source_id] = self._project_info(str(source_id))  # a fork's, once per listing
            source = sources[source_id]
            names = mr.labels[:200] if isinstance(mr.labels, list) else []
            changes.append(PullRequestChange(
                action="opened", owner=base_owner, name=name, number=mr.iid, head_ref=mr.source_branch,
                head_sha=mr.sha, clone_url=source.http_url_to_repo if source else None,
                head_repository=source.path_with_namespace if source else None, base_ref=mr.target_branch,
                updated_at=updated, draft=mr.draft or mr.work_in_progress, open=mr.state == "opened",
                labels=frozenset(str(label)[:255].lower() for label in names if isinstance(label, str))))
        return changes

    def _project_info(self, project: str) -> ListedProject | None:
        """`GET /projects/{id or url-encoded path}`, None when it is not there (a deleted fork)."""
        response = self.api.request("project", "GET", f"/projects/{project}")
        if response.status_code == 404:
            return None
        try:
            return ListedProject.model_validate(self.api.check(response).json())
        except (ValidationError, ValueError) as exc:
            raise CodeHostError(f"GET /projects/{project}: not a project ({type(exc).__name__})") from None

    def upsert_comment(self, owner: str, repo: str, number: int, comment_id: int | None, body: str) -> int:
        notes = f"/projects/{self._project(owner, repo)}/merge_requests/{number}/notes"
        if comment_id is not None:
            response = self.api.request("comment", "PUT", f"{notes}/{comment_id}", json={"body": body})
            if response.status_code != 404:
                self.api.check(response)
                return comment_id
        return int(self.api.check(self.api.request("comment", "POST", notes, json={"body": body})).json()["id"])

    def find_marked_comment(self, owner: str, repo: str, number: int, marker: str) -> int | None:
        """Among the newest 100 notes."""
        response = self.api.request("comment", "GET",
                                    f"/projects/{self._project(owner, repo)}/merge_requests/{number}/notes",
                                    params={"per_page": 100, "sort": "desc", "order_by": "created_at"})
        marked = [item["id"] for item in self.api.check(response).json() if marker in str(item.get("body", ""))]
        return int(marked[0]) if marked else None

    def set_status(self, owner: str, repo: str, sha: str | None, deployment: int | None, state: str,
                   description: str, url: str | None = None) -> None:
        if not sha or state not in COMMIT_STATES:
            return
        body: dict[str, Any] = {"state": COMMIT_STATES[state], "name": CONTEXT, "description": description[:140]}
        if url and state == "success":
            body["target_url"] = url
        self.api.check(self.api.request("commit_status", "POST",
                                        f"/projects/{self._project(owner, repo)}/statuses/{sha}", json=body))

    def checks(self) -> list[Check]:
        name = f"GitLab API reachable ({self.url}, GITLAB_URL)"
        if not self.token:
            return [Check(name, False, "no GITLAB_TOKEN: notes and statuses cannot be posted",
                          "set GITLAB_TOKEN (a token with the api scope, role Developer or more)")]
        try:
            response = self.api.once("user", "GET", "/user")
        except httpx.HTTPError as exc:
            return [Check(name, False, type(exc).__name__, "check the network, or GITLAB_URL")]
        if response.status_code != 200:
            return [Check(name, False, f"the token was refused ({response.status_code})",
                          "set a valid GITLAB_TOKEN; GITLAB_URL is the server's address, without /api/v4")]
        return [Check(name, True, f"token of {str(response.json().get('username', '?'))[:100]}")]
