"""Where pull requests come from: the interface a code-host plugin implements.

A code host is two things to the service: webhook deliveries it must trust and understand, and an API it must
answer through. A plugin subclasses `CodeHost` and provides it with the `po_codehosts` and `po_codehost` hooks
(built in: `github`, `gitea`, `gitlab`; orchestrator/codehosts/). The service gives every host that is on its own
webhook path, `POST /webhook/{name}`, and for each delivery there:

1. `claims(delivery)`: a reason the delivery is not this host's (another host's headers), or None;
2. `verify(delivery)`: raise `WebhookRejected(401, "Invalid signature")` unless it is signed with the host's
   secret (compare in constant time: `signature_matches`);
3. `parse(delivery)`: the pull-request change it reports, in the service's words (`PullRequestChange`), a new
   comment on a pull request (`PullRequestComment`: the service reads `/preview …` commands from it), or
   a push to a branch (`BranchPush`: a base preview of BASE_PREVIEWS follows its default branch), or
   `Ignored(reason)` for anything else (a ping, another event, an action that changes nothing).
   `WebhookRejected(400, ...)` for a body that is not what the host sends. These types, and helpers to read a
   body, are in deliveries.py; GitHub's issue-comment endpoints, which Gitea shares, in issue_comments.py.

The service then does the rest, the same for every host: the allow-list (`ALLOWED_REPOS`, entries
`{name}:owner/repo`; GitHub's without a prefix), draft and label gating, names and the inbox. Deliveries are
untrusted input until `verify` passed, and the payload's fields after it: bound what you read (`max_length`).

The API side is what a flow tells the pull request: its one comment (`upsert_comment`, `find_marked_comment`)
and a status of the deployed commit (`start_deployment`, `set_status`); for `/preview` commands, whether a
user may write to the repository (`can_write`), a short reply (`reply`) and a pull request's head (`pull_request`,
for `/preview approve`); the clone URL of a repository with a base preview (`clone_url`); and what the reconcile
asks (RECONCILE_INTERVAL_MINUTES): the open pull requests of a repository (`open_pull_requests`, as `opened`
changes) and how much of the API's rate limit is left (`rate_limit`). A host that cannot list leaves that method
out: its previews then follow its webhooks alone. A method that fails raises
`CodeHostError`; the flows log it and go on (the code host being down never fails a preview). `ApiClient`
(api_client.py) is an HTTP client with the retries every host needs (5xx, 429, Retry-After). `clone_authorization`
gives git the credentials for a clone URL of this host; `checks` are its lines of `doctor`.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.plugin_api.api_client import ApiClient, CodeHostError, RateLimit
from orchestrator.plugin_api.checks import Check
from orchestrator.plugin_api.deliveries import BranchPush, Delivery, Ignored, PullRequestChange, PullRequestComment

log = logging.getLogger("orchestrator.codehost")

# What `set_status` is told: a deploy started, succeeded, failed, or its preview is gone (or superseded).
STATES = frozenset({"in_progress", "success", "failure", "inactive"})


class CodeHostSpec(BaseModel):
    """A code host a plugin provides (`po_codehosts`): `name` is its webhook path (`/webhook/{name}`) and the
    prefix of its ALLOWED_REPOS entries."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    description: str = ""


class CodeHost:
    """The base of a code host plugin: the optional methods' defaults. Subclass it, set the class attributes,
    implement `verify`, `parse`, `upsert_comment` and `find_marked_comment`."""

    name: ClassVar[str] = ""  # the CodeHostSpec's name
    event_header: ClassVar[str] = ""  # the header naming the event (its value labels the webhook metrics)
    delivery_header: ClassVar[str] = ""  # the header with the delivery's unique id (redeliveries keep it)
    aliases: ClassVar[tuple[str, ...]] = ()  # more webhook paths than /webhook/{name}
    # What an operator registers on the host, for `serve`'s first lines: `{url}` is this host's webhook URL.
    registration: ClassVar[str] = "add a webhook with URL {url} (docs/codehosts.md)"

    def claims(self, delivery: Delivery) -> str | None:
        """Why this delivery is not this host's (it carries another host's headers), or None."""
        return None

    def verify(self, delivery: Delivery) -> None:
        raise NotImplementedError

    def parse(self, delivery: Delivery) -> PullRequestChange | PullRequestComment | BranchPush | Ignored:
        raise NotImplementedError

    def event_name(self, delivery: Delivery) -> str | None:
        return delivery.header(self.event_header) if self.event_header else None

    def delivery_id(self, delivery: Delivery) -> str | None:
        return delivery.header(self.delivery_header) if self.delivery_header else None

    # The API --------------------------------------------------------------------------------------------

    def upsert_comment(self, owner: str, repo: str, number: int, comment_id: int | None, body: str) -> int:
        """Edit comment `comment_id` (or create one when it is None or was deleted); returns its id."""
        raise NotImplementedError

    def find_marked_comment(self, owner: str, repo: str, number: int, marker: str) -> int | None:
        """The newest comment on the pull request whose body contains `marker` (the service's own), or None."""
        raise NotImplementedError

    def start_deployment(self, owner: str, repo: str, sha: str, environment: str, description: str) -> int | None:
        """A deployment of `sha` to `environment` where the host has them (GitHub's "View deployment" button);
        None where it reports by commit status alone."""
        return None

    def set_status(self, owner: str, repo: str, sha: str | None, deployment: int | None, state: str,
                   description: str, url: str | None = None) -> None:
        """Report `state` (STATES) of the preview of `sha`, or of `deployment` where `start_deployment` made
        one; `url`: the preview's, with `success`."""

    def can_write(self, owner: str, repo: str, author: str, author_id: int | None) -> bool:
        """Whether `author` may push to `owner/repo` (write, maintain or admin; GitLab: Developer or more): who may
        run `/preview` commands. CodeHostError when the host cannot say. The default: nobody."""
        return False

    def reply(self, owner: str, repo: str, number: int, body: str) -> None:
        """A short new comment on the pull request (the answer to a command that was not run)."""
        self.upsert_comment(owner, repo, number, None, body)

    def pull_request(self, owner: str, repo: str, number: int) -> PullRequestChange | None:
        """The pull request as it is now, as an `opened` change (its head, clone URL, state), or None when the host
        cannot say (`/preview approve` deploys what this returns). CodeHostError when the call fails."""
        return None

    def open_pull_requests(self, owner: str, repo: str) -> list[PullRequestChange] | None:
        """Every open pull request of `owner/repo`, each as an `opened` change (draft flag and labels as a delivery
        would say them), from one paged listing; CodeHostError when any page fails (the reconcile then leaves the
        repository's previews as they are). None: this host cannot list."""
        return None

    def clone_url(self, owner: str, repo: str) -> str | None:
        """The HTTP clone URL of `owner/repo` (what a base preview of BASE_PREVIEWS clones; its default branch and
        head are then read through git), or None when this host cannot say. CodeHostError when the call fails."""
        return None

    def rate_limit(self) -> RateLimit | None:
        """The API's rate limit as its last answer said, None when unknown (the reconcile reports and respects it)."""
        return None

    def clone_authorization(self, clone_url: str) -> str | None:
        """The `Authorization` header git sends when cloning `clone_url`, when it is this host's and there is a
        token; None otherwise (never send a token to another host)."""
        return None

    def secrets(self) -> list[str]:
        """The secret values this host holds (tokens, webhook secrets): masked in logs and deployment logs."""
        return []

    def webhook_secret(self) -> str | None:
        """The secret its deliveries are signed with: no two hosts that are on may share one (a delivery one host
        signed would pass at another host's path as that host's pull request)."""
        return None

    def checks(self) -> list[Check]:
        """This host's lines of `doctor` (API reachable, token accepted, secret set)."""
        return []

    def close(self) -> None:
        """Release what the host holds (its HTTP client) at shutdown."""


class ApiCodeHost(CodeHost):
    """A code host answered through an ApiClient with a token, whose deliveries are signed with a shared secret
    (GitHub, Gitea): keeps them, masks them in logs and closes the client at shutdown."""

    def __init__(self, api: ApiClient, url: str, token: str, secret: str) -> None:
        self.api = api
        self.url = url  # the API's (GitHub) or the server's (Gitea) address: what clone URLs are compared with
        self.token = token
        self.secret = secret.encode()

    def secrets(self) -> list[str]:
        return [value for value in (self.token, self.secret.decode()) if value]

    def webhook_secret(self) -> str | None:
        return self.secret.decode() or None

    def clone_authorization(self, clone_url: str) -> str | None:
        """The token for clone URLs of `url`'s own scheme, host and port (a server whose API is under its own
        address: Gitea, GitLab), never another host's."""
        clone, own = urlsplit(clone_url), urlsplit(self.url)
        if not clone.hostname or clone.scheme not in ("http", "https"):
            return None
        ours = (own.scheme, (own.hostname or "").lower(), own.port)
        return self.token_authorization() if (clone.scheme, clone.hostname.lower(), clone.port) == ours else None

    def rate_limit(self) -> RateLimit | None:
        return self.api.rate_limit

    def clone_url(self, owner: str, repo: str) -> str | None:
        """`GET /repos/{owner}/{repo}`'s `clone_url` (GitHub's and Gitea's shape)."""
        return repository_clone_url(self.api, f"/repos/{owner}/{repo}", "clone_url")

    def token_authorization(self, token: str | None = None) -> str | None:
        """A token (the host's own by default) as git's Authorization header (`Basic x-access-token:TOKEN`, which
        GitHub, Gitea, Forgejo and GitLab accept), or None without one; `clone_authorization` decides for which
        clone URLs."""
        token = self.token if token is None else token
        if not token:
            return None
        return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()

    def close(self) -> None:
        self.api.close()


def unreadable_item(owner: str, repo: str, item: Any, problem: str) -> PullRequestChange:
    """An open pull request of a listing the service cannot read (a branch name too long, a field it does not know):
    counted as open (its preview is never removed for it), acted on by nothing (no head). CodeHostError when not
    even its number can be read: the whole listing is then not used."""
    number = item.get("number", item.get("iid")) if isinstance(item, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise CodeHostError(f"the open pull requests' listing: an item without a number ({problem})")
    log.warning("%s/%s#%d as listed cannot be read (%s): it counts as open, and nothing else", owner, repo, number,
                problem)
    return PullRequestChange(action="opened", owner=owner, name=repo, number=number, head_ref=None, head_sha=None,
                             clone_url=None, head_repository=None, base_ref=None)


def repository_clone_url(api: ApiClient, path: str, key: str, headers: dict[str, str] | None = None) -> str | None:
    """`GET {path}` of a repository (GitHub's and Gitea's shape): its HTTP clone URL `key`, or None when the
    repository is not there (404). CodeHostError for another failure or an answer without one."""
    response = api.request("repository", "GET", path, headers=headers)
    if response.status_code == 404:
        return None
    body = api.check(response).json()
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value or len(value) > 2048:  # the clone's own checks judge the rest
        raise CodeHostError(f"GET {path}: no {key} in the answer")
    return value
