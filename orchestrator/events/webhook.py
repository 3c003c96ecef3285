"""Turning a raw webhook delivery into a validated PullRequestEvent, step by step.

Order matters and follows the design notes: signature over the raw bytes → JSON → event type and action →
payload schema → allow-list. Each step raises WebhookRejected with the HTTP status and message to answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from orchestrator.common.naming import deployment_id, project_slug
from orchestrator.events.gating import Gate
from orchestrator.state.records import HANDLED_ACTIONS, PullRequestEvent, WebhookPayload

log = logging.getLogger("orchestrator.events.webhook")
GATED_ACTIONS = frozenset({"ready_for_review", "converted_to_draft", "labeled", "unlabeled"})

MAX_BODY_BYTES = 25 * 1024 * 1024
_DELIVERY_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")
_NEEDS_HEAD = ("opened", "reopened", "synchronize")


class WebhookRejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Ignored:
    """A delivery acknowledged with 200 and otherwise ignored (ping, other events, other actions)."""

    reason: str


def verify_signature(secret: bytes, body: bytes, header: str | None) -> None:
    if not header or not header.startswith("sha256="):
        raise WebhookRejected(401, "Invalid signature")
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), header.strip().encode("ascii", "replace")):
        raise WebhookRejected(401, "Invalid signature")


def parse_delivery(
    body: bytes,
    event_type: str | None,
    delivery_header: str | None,
    allowed_repos: frozenset[str],
    gate: Gate = Gate(),  # noqa: B008 - frozen, never changed
) -> PullRequestEvent | Ignored:
    """Validate a signed delivery; returns the event to process or why it is ignored."""
    delivery_id = _delivery_id(delivery_header)
    document = _json_object(body)
    event_type = event_type or _event_of(document)
    if event_type == "ping":
        return Ignored("ping")
    if event_type != "pull_request":
        return Ignored(f"event {event_type or '(none)'} is not handled")
    action = document.get("action")
    if not isinstance(action, str):
        raise WebhookRejected(400, "Invalid payload: action is required and must be a string")
    if action not in HANDLED_ACTIONS | GATED_ACTIONS:
        return Ignored(f"pull_request action {action[:40]!r} is not handled")
    effective, why = gate.decide(action, document)
    try:
        # Validated as the action it is acted on as (labeled → opened); a gated-out one as itself would be.
        payload = WebhookPayload.model_validate({**document, "action": effective or "opened"})
    except ValidationError as exc:
        raise WebhookRejected(400, "Invalid payload: " + describe_problems(exc)) from None
    full_name = payload.repository.full_name
    if full_name.lower() not in allowed_repos:
        raise WebhookRejected(403, "Repository not in allowed list")
    if effective is None:
        return Ignored(f"pull request #{payload.pull_request.number}: {why}")
    if effective != action:
        log.info("pull request #%s %s", payload.pull_request.number, why)
    return _event(payload, delivery_id)


def _event_of(document: dict[str, Any]) -> str | None:
    """The event of a signed delivery sent without X-GitHub-Event (the spec requires only the content type and
    the signature): what the body's shape says it is."""
    if isinstance(document.get("pull_request"), dict) and "action" in document:
        return "pull_request"
    if "zen" in document and "hook_id" in document:
        return "ping"
    return None


def _delivery_id(header: str | None) -> str:
    if header is None or header == "":
        return f"local-{uuid.uuid4()}"
    if not _DELIVERY_PATTERN.match(header):
        raise WebhookRejected(400, "Invalid X-GitHub-Delivery header")
    return header


def _json_object(body: bytes) -> dict[str, Any]:
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


def describe_problems(exc: ValidationError) -> str:
    """The first three problems of a validation error, each naming its field."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False)[:3]:
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "missing":
            problems.append(f"{where} is required")
        else:
            problems.append(f"{where} is not valid ({error['msg'].removeprefix('Value error, ')})")
    return "; ".join(problems)


def _event(payload: WebhookPayload, delivery_id: str) -> PullRequestEvent:
    pr = payload.pull_request
    owner, _, name = payload.repository.full_name.partition("/")
    try:
        slug = project_slug(owner, name)
    except ValueError as exc:
        raise WebhookRejected(400, f"Invalid payload: {exc}") from None
    if payload.action in _NEEDS_HEAD:
        missing = [f"pull_request.head.{f}" for f in ("ref", "sha") if getattr(pr.head, f) is None]
        if missing:
            raise WebhookRejected(400, f"Invalid payload: {', '.join(missing)} required for {payload.action}")
    head_repo = pr.head.repo
    return PullRequestEvent(
        delivery_id=delivery_id,
        action=payload.action,
        deployment_id=deployment_id(slug, pr.number),
        project_slug=slug,
        repo_owner=owner,
        repo_name=name,
        pr_number=pr.number,
        branch=pr.head.ref,
        commit_sha=pr.head.sha,
        clone_url=(head_repo.clone_url if head_repo else None) or payload.repository.clone_url,
        head_repo_full_name=head_repo.full_name if head_repo else None,
        base_ref=pr.base.ref,
        received_at=datetime.now(UTC),
        pr_updated_at=pr.updated_at,
    )
