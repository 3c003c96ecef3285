"""What a code host's webhook delivery is to the service (codehost.py): the delivery as received, checks of its
body and signature, and what `CodeHost.parse` turns it into — a pull-request change, a comment, or a reason to
ignore it — or the answer that refuses it."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.common.problems import describe_problems

# The actions a change may carry (GitHub's names): the first four are acted on as they are; the others go
# through the service's gating (PREVIEW_DRAFTS, PREVIEW_LABEL) and become a deploy, a cleanup or nothing.
# `labels_changed`: the labels changed and the host does not say which (Gitea): the current ones decide.
ACTIONS = frozenset({"opened", "reopened", "synchronize", "closed", "ready_for_review", "converted_to_draft",
                     "labeled", "unlabeled", "labels_changed"})

class WebhookRejected(Exception):
    """A delivery answered with `status` (400, 401, 403, ...) and `message`, and not acted on. `about`: the pull
    request it names (owner/name, number, action) once its body was verified and read, for the delivery log."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.about: tuple[str, int, str] | None = None


@dataclass(frozen=True)
class Ignored:
    """A delivery acknowledged with 200 and otherwise ignored (a ping, other events, other actions). `about`: the
    pull request it names (owner/name, number, action), when the service knows it (the delivery log shows it)."""

    reason: str
    about: tuple[str, int, str] | None = None


class PayloadModel(BaseModel):
    """The base of a delivery's pydantic models: code hosts add fields all the time, only the ones read are checked
    (bound them: `Field(max_length=…)`)."""

    model_config = ConfigDict(extra="ignore")


Payload = TypeVar("Payload", bound=BaseModel)


def validated(model: type[Payload], document: Any) -> Payload:
    """`document` read as `model`; WebhookRejected (400) naming what is wrong when it is not one."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise WebhookRejected(400, "Invalid payload: " + describe_problems(exc)) from None


@dataclass(frozen=True)
class Delivery:
    """One webhook delivery as received: header names lower case, the raw body."""

    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class PullRequestChange:
    """What a pull-request delivery says, in the service's words. `owner`/`name` is the repository the pull
    request is *to* (its base); `head_repository` and `clone_url` are those of the branch (a fork's, for a fork);
    `head_repository` None: the head repository is gone. The service checks names, branch and commit."""

    action: str  # one of ACTIONS
    owner: str
    name: str
    number: int
    head_ref: str | None
    head_sha: str | None
    clone_url: str | None
    head_repository: str | None
    base_ref: str | None
    updated_at: datetime | None = None  # the pull request's last change: older events are not acted on
    draft: bool = False
    labels: frozenset[str] = field(default_factory=frozenset)  # lower case
    changed_label: str | None = None  # `labeled`/`unlabeled`: the label
    open: bool = True  # the pull request's state: a change of a closed one can only remove its preview


@dataclass(frozen=True)
class PullRequestComment:
    """A comment just written on a pull request of `owner/name`: the service looks for a `/preview …` command in it.
    `author_id`: the author's numeric id where the host's permission API wants it (GitLab)."""

    owner: str
    name: str
    number: int
    author: str
    body: str
    author_id: int | None = None
    # The comment's id and time as the signed body says: a comment runs its command once, however often its
    # delivery is sent again (the delivery id header is not signed), and an old one never.
    comment_id: int | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class BranchPush:
    """A push to a branch (or tag) of `owner/name`: a base preview (BASE_PREVIEWS) follows its default branch. `ref`
    as the host says it (`refs/heads/main`), `sha` the new head, `deleted` for a branch that went away."""

    owner: str
    name: str
    ref: str
    sha: str | None
    default_branch: str | None
    clone_url: str | None
    deleted: bool = False
    pushed_at: datetime | None = None  # when the host received the push: an older push than one acted on is stale

    @property
    def branch(self) -> str | None:
        """The branch pushed to; None for a tag or another kind of ref."""
        return self.ref.removeprefix("refs/heads/") if self.ref.startswith("refs/heads/") else None


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or WebhookRejected(400) naming what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WebhookRejected(400, "Invalid payload: body is not UTF-8") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise WebhookRejected(400, f"Invalid payload: body is not JSON ({exc.args[0][:80]})") from None
    except RecursionError:
        # The C decoder guards its own recursion; nesting that deep is never a real payload.
        raise WebhookRejected(400, "Invalid payload: JSON is nested too deeply") from None
    if not isinstance(document, dict):
        raise WebhookRejected(400, "Invalid payload: body must be a JSON object")
    return document


def labels_of(labels: Any, key: str) -> frozenset[str]:
    """The names (`key`: `name`, GitLab's `title`) of the first 200 labels of a delivery, lower case, read
    leniently: anything not a list of objects is no label (what only the gating reads never refuses a delivery,
    least of all a `closed` one)."""
    items = labels[:200] if isinstance(labels, list) else []
    return frozenset(str(item.get(key, ""))[:255].lower() for item in items if isinstance(item, dict))


def signature_matches(secret: bytes, body: bytes, given: str | None, prefix: str = "") -> bool:
    """Whether `given` is `prefix` + the hex HMAC-SHA256 of `body` under `secret`, compared in constant time."""
    if not given or not secret:
        return False
    expected = prefix + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), given.strip().encode("ascii", "replace"))
