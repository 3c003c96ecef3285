"""The `github` code host: GitHub and GitHub Enterprise Server.

Deliveries come to the spec's `POST /webhook/codehost` (and `POST /webhook/github`), signed in
`X-Hub-Signature-256` (`sha256=` + hex HMAC-SHA256 of the body under CODEHOST_WEBHOOK_SECRET). The API is
CODEHOST_API_URL with CODEHOST_TOKEN: one comment per pull request (created, then edited) and a deployment per
head commit with statuses (the pull request's "View deployment" button). Gitea and Forgejo send GitHub's headers
too; a delivery that also carries theirs is not GitHub's and is refused here (it belongs at /webhook/gitea).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import httpx

from orchestrator.codehosts.github_app import AppTokens
from orchestrator.codehosts.github_payload import listed_pull_request, parse_pull_request
from orchestrator.plugin_api import Check, Metrics, hookimpl
from orchestrator.plugin_api.codehost import (
    ApiClient,
    ApiCodeHost,
    CodeHostError,
    CodeHostSpec,
    repository_clone_url,
    unreadable_item,
)
from orchestrator.plugin_api.deliveries import (
    BranchPush,
    Delivery,
    Ignored,
    PullRequestChange,
    PullRequestComment,
    WebhookRejected,
    json_object,
    signature_matches,
)
from orchestrator.plugin_api.issue_comments import find_issue_comment, upsert_issue_comment

log = logging.getLogger("orchestrator.codehosts.github")
NAME = "github"
# Headers only Gitea, Forgejo and Gogs send (beside GitHub's): such a delivery is theirs.
FOREIGN_HEADERS = ("x-gitea-event", "x-forgejo-event", "x-gogs-event")
# GitHub's deployment states for the service's (plugin_api.codehost.STATES).
DEPLOYMENT_STATES = {"in_progress": "in_progress", "success": "success", "failure": "failure",
                     "inactive": "inactive"}


@hookimpl(trylast=True)
def po_codehosts() -> list[CodeHostSpec]:
    return [CodeHostSpec(name=NAME, description="GitHub and GitHub Enterprise Server (CODEHOST_*)")]


@hookimpl(trylast=True)
def po_codehost(name: str, settings: Any, metrics: Metrics) -> GitHub | None:
    """Always on: CODEHOST_WEBHOOK_SECRET is required (the spec). With GITHUB_APP_ID and
    GITHUB_APP_PRIVATE_KEY_FILE it answers as that GitHub App (github_app.py) instead of with CODEHOST_TOKEN."""
    if name != NAME:
        return None
    app_id = settings.github_app_id
    token = "" if app_id else settings.codehost_token.get_secret_value()
    api = api_client(settings.codehost_api_url, token, retry_base=settings.codehost_retry_base_seconds,
                     metrics=metrics)
    app = None
    if app_id:
        app = AppTokens(app_id, settings.github_app_private_key_file.read_bytes(), api)
    return GitHub(api, settings.codehost_api_url, token, settings.codehost_webhook_secret.get_secret_value(), app)


def api_client(api_url: str, token: str, *, metrics: Metrics, **options: Any) -> ApiClient:
    """GitHub's REST API at `api_url` (`ApiClient`'s other options: retry_base, sleep, transport)."""
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return ApiClient(api_url, headers, metrics=metrics, **options)


class GitHub(ApiCodeHost):
    name = NAME
    event_header = "X-GitHub-Event"
    delivery_header = "X-GitHub-Delivery"
    aliases = ("codehost",)  # the spec's path
    registration = "add a webhook with URL {url}, content type application/json, that secret, and the \"Pull " \
                   "requests\" event (and \"Pushes\" for BASE_PREVIEWS)"

    def __init__(self, api: ApiClient, url: str, token: str, secret: str, app: AppTokens | None = None) -> None:
        super().__init__(api, url, token, secret)
        self.app = app

    def secrets(self) -> list[str]:
        # A GitHub App's installation tokens are fetched and renewed while the service runs: asked each time.
        return [*super().secrets(), *(self.app.tokens() if self.app is not None else [])]

    def _as(self, owner: str, repo: str) -> dict[str, str]:
        """The headers a call about `owner/repo` adds: a GitHub App's installation token (else the client's
        CODEHOST_TOKEN)."""
        return {"Authorization": f"Bearer {self.app.token_for(owner, repo)}"} if self.app else {}

    # Deliveries -----------------------------------------------------------------------------------------

    def claims(self, delivery: Delivery) -> str | None:
        foreign = next((name for name in FOREIGN_HEADERS if delivery.header(name) is not None), None)
        return f"a delivery with {foreign}: not GitHub's (send it to /webhook/gitea)" if foreign else None

    def verify(self, delivery: Delivery) -> None:
        if not signature_matches(self.secret, delivery.body, delivery.header("X-Hub-Signature-256"), "sha256="):
            raise WebhookRejected(401, "Invalid signature")

    def parse(self, delivery: Delivery) -> PullRequestChange | PullRequestComment | BranchPush | Ignored:
        parsed = parse_pull_request(delivery.body, delivery.header(self.event_header))
        if self.app is not None and isinstance(parsed, PullRequestChange | PullRequestComment | BranchPush):
            # A GitHub App's delivery names its installation (verified: the body is signed); the service's own
            # calls for other repositories look it up (GET /repos/{owner}/{repo}/installation).
            installation = json_object(delivery.body).get("installation")
            if isinstance(installation, dict):
                self.app.remember(parsed.owner, parsed.name, installation.get("id"))
        return parsed

    # The API --------------------------------------------------------------------------------------------

    def upsert_comment(self, owner: str, repo: str, number: int, comment_id: int | None, body: str) -> int:
        return upsert_issue_comment(self.api, owner, repo, number, comment_id, body, self._as(owner, repo))

    def find_marked_comment(self, owner: str, repo: str, number: int, marker: str) -> int | None:
        """Among the first 100 comments."""
        return find_issue_comment(self.api, owner, repo, number, marker, {"per_page": 100}, self._as(owner, repo))

    def can_write(self, owner: str, repo: str, author: str, author_id: int | None) -> bool:
        """`GET /repos/{owner}/{repo}/collaborators/{user}/permission`: `admin` or `write` (maintain is `write`)."""
        response = self.api.request("permission", "GET", f"/repos/{owner}/{repo}/collaborators/{author}/permission",
                                    headers=self._as(owner, repo))
        if response.status_code == 404:  # not a collaborator (or not a user)
            return False
        return str(self.api.check(response).json().get("permission")) in ("admin", "write")

    def pull_request(self, owner: str, repo: str, number: int) -> PullRequestChange | None:
        response = self.api.request("pull", "GET", f"/repos/{owner}/{repo}/pulls/{number}",
                                    headers=self._as(owner, repo))
        return listed_pull_request(self.api.check(response).json())

    def clone_url(self, owner: str, repo: str) -> str | None:
        """`GET /repos/{owner}/{repo}`: its `clone_url`."""
        return repository_clone_url(self.api, f"/repos/{owner}/{repo}", "clone_url", self._as(owner, repo))

    def open_pull_requests(self, owner: str, repo: str) -> list[PullRequestChange]:
        """`GET /repos/{owner}/{repo}/pulls?state=open`, 100 a page, each page conditional (ETag)."""
        items = self.api.paged("pulls", f"/repos/{owner}/{repo}/pulls", {"state": "open", "per_page": 100},
                               self._as(owner, repo))
        changes = []
        for item in items:
            try:
                changes.append(listed_pull_request(item))
            except CodeHostError as exc:
                changes.append(unreadable_item(owner, repo, item, str(exc)))
        return changes

    def start_deployment(self, owner: str, repo: str, sha: str, environment: str, description: str) -> int | None:
        """No merge of the base branch and no required status checks: the preview deploys exactly the pushed
        commit."""
        response = self.api.request("deployment", "POST", f"/repos/{owner}/{repo}/deployments", json={
            "ref": sha, "environment": environment, "description": description[:140], "auto_merge": False,
            "required_contexts": [], "production_environment": False, "transient_environment": True,
        }, headers=self._as(owner, repo))
        return int(self.api.check(response).json()["id"])

    def set_status(self, owner: str, repo: str, sha: str | None, deployment: int | None, state: str,
                   description: str, url: str | None = None) -> None:
        if deployment is None:
            return  # GitHub reports on the deployment start_deployment made
        body: dict[str, Any] = {"state": DEPLOYMENT_STATES[state], "description": description[:140]}
        if url:
            body["environment_url"] = url
        self.api.check(self.api.request("deployment_status", "POST",
                                        f"/repos/{owner}/{repo}/deployments/{deployment}/statuses", json=body,
                                        headers=self._as(owner, repo)))

    def clone_authorization(self, clone_url: str) -> str | None:
        if not token_applies(clone_url, self.url):
            return None
        if self.app is None:
            return self.token_authorization()
        # A GitHub App: the token of the installation covering the repository the URL names (/owner/repo[.git]).
        parts = urlsplit(clone_url).path.strip("/").removesuffix(".git").split("/")
        if len(parts) != 2:
            return None
        try:
            return self.token_authorization(self.app.token_for(*parts))
        except CodeHostError as exc:
            log.warning("no installation token for %s: %s", clone_url, exc)
            return None

    def checks(self) -> list[Check]:
        if self.app is not None:
            return [self._app_check(self.app)]
        name = f"code host API reachable ({self.url})"
        try:
            response = self.api.once("rate_limit", "GET", "/rate_limit")
        except httpx.HTTPError as exc:
            return [Check(name, False, type(exc).__name__, "check the network, or CODEHOST_API_URL")]
        if response.status_code == 401:
            return [Check(name, False, "the token was refused (401)", "set a valid CODEHOST_TOKEN")]
        if response.status_code != 200:
            return [Check(name, False, f"HTTP {response.status_code}", "check CODEHOST_API_URL")]
        try:
            core = response.json()["resources"]["core"]
            detail = f"{core['remaining']}/{core['limit']} requests left this hour"
        except (ValueError, KeyError, TypeError):
            detail = "answered"
        if not self.token:
            detail += "; no CODEHOST_TOKEN: comments cannot be posted"
        return [Check(name, bool(self.token), detail, "set CODEHOST_TOKEN (pull-request comments need it)")]


    def _app_check(self, app: AppTokens) -> Check:
        name = f"GitHub App {app.app_id} accepted ({self.url}, GITHUB_APP_ID)"
        try:
            response = self.api.once("app", "GET", "/app", headers={"Authorization": f"Bearer {app.app_jwt()}"})
        except httpx.HTTPError as exc:
            return Check(name, False, type(exc).__name__, "check the network, or CODEHOST_API_URL")
        if response.status_code != 200:
            return Check(name, False, f"its token was refused ({response.status_code})",
                         "check GITHUB_APP_ID and that GITHUB_APP_PRIVATE_KEY_FILE is that app's current key")
        return Check(name, True, f"{str(response.json().get('name', '?'))[:100]}; installed on "
                                 f"{response.json().get('installations_count', '?')} account(s)")


def token_applies(clone_url: str, api_url: str) -> bool:
    """Send the token only to the code host itself (github.com for api.github.com; the same host for GHE, whose
    API is under /api/v3), over the API's own scheme and port."""
    clone, api = urlsplit(clone_url), urlsplit(api_url)
    if clone.scheme not in ("https", "http") or clone.scheme != api.scheme or not clone.hostname or not api.hostname:
        return False
    if clone.port != api.port:
        return False
    api_host = api.hostname.lower()
    web_host = api_host.removeprefix("api.")
    return clone.hostname.lower() in (api_host, web_host)
