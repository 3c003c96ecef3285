"""Turning a code host's delivery into a validated PullRequestEvent, step by step.

Order matters and follows the design notes: the host's signature over the raw bytes → (the resource checks the
content type) → the host's plugin parses the body into a PullRequestChange → the allow-list → gating → names,
branch and commit. Each step raises WebhookRejected with the HTTP status and message to answer.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import UTC, datetime

from orchestrator.common.naming import CODEHOST, SHA_PATTERN, branch_problem, deployment_id, project_slug
from orchestrator.events.gating import CLEANUP, Gate
from orchestrator.plugin_api.codehost import CodeHost, Delivery, Ignored, PullRequestChange, WebhookRejected
from orchestrator.state.records import MAX_PR_NUMBER, EventTrigger, PullRequestEvent

__all__ = ["MAX_BODY_BYTES", "Ignored", "WebhookRejected", "event_of", "parse_delivery"]
log = logging.getLogger("orchestrator.events.webhook")

MAX_BODY_BYTES = 25 * 1024 * 1024
_DELIVERY_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")
_NEEDS_HEAD = ("opened", "reopened", "synchronize")


def parse_delivery(host: CodeHost, delivery: Delivery, allowed_repos: frozenset[str],
                   gate: Gate = Gate()) -> PullRequestEvent | Ignored:  # noqa: B008 - frozen, never changed
    """A verified delivery of `host`: the event to process, or why it is ignored."""
    delivery_id = _delivery_id(host, delivery)
    change = host.parse(delivery)
    if isinstance(change, Ignored):
        return change
    about = (f"{change.owner}/{change.name}"[:300], change.number, change.action)
    try:
        if f"{change.owner}/{change.name}".lower() not in allowed_repos:
            raise WebhookRejected(403, "Repository not in allowed list")
        effective, why = gate.decide(change)
        if effective is None:
            return Ignored(f"pull request #{change.number}: {why}", about)
        if effective != CLEANUP and not change.open:
            # A label or a title changed on a closed or merged pull request: it must not run again.
            return Ignored(f"pull request #{change.number} is not open: {change.action} deploys nothing", about)
        if effective != change.action:
            log.info("pull request #%s %s", change.number, why)
        return event_of(host.name, change, effective, delivery_id)
    except WebhookRejected as rejected:
        rejected.about = about
        raise


def _delivery_id(host: CodeHost, delivery: Delivery) -> str:
    header = host.delivery_id(delivery)
    if header is None or header == "":
        return f"local-{uuid.uuid4()}"
    if not _DELIVERY_PATTERN.match(header):
        raise WebhookRejected(400, f"Invalid {host.delivery_header} header")
    # Ids are unique per host, not between hosts: another host's are kept apart by its name (GitHub's as they are).
    return header if host.name == CODEHOST else f"{host.name}:{header}"


def event_of(codehost: str, change: PullRequestChange, action: str, delivery_id: str,
             trigger: EventTrigger | None = None) -> PullRequestEvent:
    """The event of a change (a delivery's, or the reconcile's look at the open pull requests) once its names,
    branch and commit are checked; WebhookRejected(400) says which is not valid."""
    if not 1 <= change.number <= MAX_PR_NUMBER:
        raise WebhookRejected(400, "Invalid payload: the pull request's number is not valid")
    try:
        slug = project_slug(change.owner, change.name)
    except ValueError as exc:
        raise WebhookRejected(400, f"Invalid payload: {exc}") from None
    if change.head_ref is not None and (problem := branch_problem(change.head_ref)):
        raise WebhookRejected(400, f"Invalid payload: the head branch name {problem}")
    if change.head_sha is not None and not SHA_PATTERN.match(change.head_sha):
        raise WebhookRejected(400, "Invalid payload: the head commit must be a 40 or 64 character hex SHA")
    if change.clone_url is not None and len(change.clone_url) > 2048:
        raise WebhookRejected(400, "Invalid payload: the clone URL is longer than 2048 characters")
    if action in _NEEDS_HEAD:
        missing = [what for what, value in (("ref", change.head_ref), ("sha", change.head_sha)) if value is None]
        if missing:
            fields = ", ".join(f"pull_request.head.{what}" for what in missing)
            raise WebhookRejected(400, f"Invalid payload: {fields} required for {action}")
    return PullRequestEvent(
        delivery_id=delivery_id,
        action=action,
        deployment_id=deployment_id(slug, change.number),
        project_slug=slug,
        repo_owner=change.owner,
        repo_name=change.name,
        pr_number=change.number,
        branch=change.head_ref,
        commit_sha=change.head_sha,
        clone_url=change.clone_url,
        head_repo_full_name=change.head_repository,
        base_ref=change.base_ref,
        received_at=datetime.now(UTC),
        codehost=codehost,
        pr_updated_at=change.updated_at,
        trigger=trigger,
    )
