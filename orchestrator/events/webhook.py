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

from orchestrator.common.naming import CODEHOST, deployment_id
from orchestrator.events.commands import command_in
from orchestrator.events.gating import CLEANUP, Gate
from orchestrator.events.inbox import KEEP_FINISHED
from orchestrator.flows.change_event import base_event, checked_slug, event_of
from orchestrator.plugin_api.codehost import CodeHost
from orchestrator.plugin_api.deliveries import BranchPush, Delivery, Ignored, PullRequestComment, WebhookRejected
from orchestrator.state.records import PullRequestEvent

__all__ = ["MAX_BODY_BYTES", "Ignored", "WebhookRejected", "event_of", "parse_delivery"]
log = logging.getLogger("orchestrator.events.webhook")

MAX_BODY_BYTES = 25 * 1024 * 1024
_DELIVERY_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")


def parse_delivery(host: CodeHost, delivery: Delivery, allowed_repos: frozenset[str],
                   gate: Gate = Gate(), base_repos: frozenset[str] = frozenset()  # noqa: B008 - frozen
                   ) -> PullRequestEvent | Ignored:
    """A verified delivery of `host`: the event to process, or why it is ignored. `base_repos`: the host's
    BASE_PREVIEWS, whose default branch's pushes update their base preview."""
    delivery_id = _delivery_id(host, delivery)
    change = host.parse(delivery)
    if isinstance(change, Ignored):
        return change
    if isinstance(change, PullRequestComment):
        return _comment(host, change, allowed_repos, delivery_id)
    if isinstance(change, BranchPush):
        return _push(host, change, allowed_repos, base_repos, delivery_id)
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


def _comment(host: CodeHost, comment: PullRequestComment, allowed_repos: frozenset[str],
             delivery_id: str) -> PullRequestEvent | Ignored:
    """A comment on a pull request: a `command` event when it holds a `/preview …` line."""
    about = (f"{comment.owner}/{comment.name}"[:300], comment.number, "comment")
    if f"{comment.owner}/{comment.name}".lower() not in allowed_repos:
        rejected = WebhookRejected(403, "Repository not in allowed list")
        rejected.about = about
        raise rejected
    found = command_in(comment.body)
    if found is None:
        return Ignored(f"pull request #{comment.number}: a comment without a /preview command", about)
    written = comment.created_at
    if written is not None and written.tzinfo is None:
        written = written.replace(tzinfo=UTC)
    if written is not None and written < datetime.now(UTC) - KEEP_FINISHED:
        # Older than the inbox remembers delivery ids: only a delivery sent again can be that old.
        return Ignored(f"pull request #{comment.number}: a comment written {written:%Y-%m-%d}, "
                       "too long ago to run its command", about)
    if comment.comment_id is not None:  # the comment runs once, whatever the (unsigned) delivery header says
        delivery_id = f"{host.name}:comment:{comment.comment_id}"
    slug = checked_slug(comment.owner, comment.name, comment.number)
    return PullRequestEvent(
        delivery_id=delivery_id, action="command", deployment_id=deployment_id(slug, comment.number),
        project_slug=slug, repo_owner=comment.owner, repo_name=comment.name, pr_number=comment.number,
        received_at=datetime.now(UTC), codehost=host.name, command=found[0], command_argument=found[1],
        command_author=comment.author[:255], command_author_id=comment.author_id)


def _push(host: CodeHost, push: BranchPush, allowed_repos: frozenset[str], base_repos: frozenset[str],
          delivery_id: str) -> PullRequestEvent | Ignored:
    """A push: a `synchronize` of the repository's base preview when it is to the default branch."""
    repository = f"{push.owner}/{push.name}"
    about = (repository[:300], 0, "push")
    if repository.lower() not in allowed_repos:  # (an organisation's webhook sends every repository's pushes)
        return Ignored(f"a push to {repository[:200]}, which is not in ALLOWED_REPOS", about)
    if repository.lower() not in base_repos:
        return Ignored(f"a push to {repository[:200]}, which has no base preview (BASE_PREVIEWS)", about)
    if push.branch is None or push.branch != push.default_branch or push.deleted:
        return Ignored(f"a push to {push.ref[:200]}, not a new head of the default branch", about)
    if not push.sha or not push.clone_url:
        raise WebhookRejected(400, "Invalid payload: a push without its new head or clone URL")
    try:
        return base_event(host.name, push.owner, push.name, push.branch, push.sha, push.clone_url, "synchronize",
                          delivery_id, pushed_at=push.pushed_at)
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
