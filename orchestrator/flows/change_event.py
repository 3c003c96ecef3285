"""A pull request's change as the event the flows process: from a delivery (events/webhook.py), the reconcile's
look at the open pull requests (events/codehost_reconcile.py), or `/preview approve` (flows/commands.py), with the
same checks of names, branch and commit; and a base preview's (`base_event`: a push, or the base previews' look)."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.common.naming import BASE, SHA_PATTERN, branch_problem, deployment_id, project_slug
from orchestrator.plugin_api.deliveries import PullRequestChange, WebhookRejected
from orchestrator.state.records import MAX_PR_NUMBER, EventTrigger, PullRequestEvent

_NEEDS_HEAD = ("opened", "reopened", "synchronize")


def checked_slug(owner: str, name: str, number: int) -> str:
    """The project slug of a pull request's repository, once its number and names are checked; WebhookRejected(400)
    says which is not valid."""
    if not 1 <= number <= MAX_PR_NUMBER:
        raise WebhookRejected(400, "Invalid payload: the pull request's number is not valid")
    try:
        return project_slug(owner, name)
    except ValueError as exc:
        raise WebhookRejected(400, f"Invalid payload: {exc}") from None


def event_of(codehost: str, change: PullRequestChange, action: str, delivery_id: str,
             trigger: EventTrigger | None = None) -> PullRequestEvent:
    """The event of a change (a delivery's, or the reconcile's look at the open pull requests) once its names,
    branch and commit are checked; WebhookRejected(400) says which is not valid."""
    slug = checked_slug(change.owner, change.name, change.number)
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


def base_event(codehost: str, owner: str, name: str, branch: str, sha: str, clone_url: str, action: str,
               delivery_id: str, trigger: EventTrigger | None = None,
               pushed_at: datetime | None = None) -> PullRequestEvent:
    """The event of a base preview (BASE_PREVIEWS: the default branch of `owner/name` at `sha`), from a push (its
    time `pushed_at`: a push delivered after a newer one is stale) or the base previews' look; WebhookRejected(400)
    says which of its names is not valid."""
    slug = checked_slug(owner, name, 1)  # the number is checked by its own rules; a base has none
    if problem := branch_problem(branch):
        raise WebhookRejected(400, f"Invalid payload: the default branch name {problem}")
    if not SHA_PATTERN.match(sha):
        raise WebhookRejected(400, "Invalid payload: the pushed commit must be a 40 or 64 character hex SHA")
    if len(clone_url) > 2048:
        raise WebhookRejected(400, "Invalid payload: the clone URL is longer than 2048 characters")
    return PullRequestEvent(
        delivery_id=delivery_id, action=action, deployment_id=deployment_id(slug, BASE), project_slug=slug,
        repo_owner=owner, repo_name=name, pr_number=BASE, branch=branch, commit_sha=sha, clone_url=clone_url,
        head_repo_full_name=f"{owner}/{name}", received_at=datetime.now(UTC), codehost=codehost, trigger=trigger,
        pr_updated_at=pushed_at)
