"""What a flow tells the pull request, through its code host's plugin: its one comment (comments.py holds the
texts) and the status of the deployed commit (GitHub's deployments, Gitea's commit statuses). The code host being
down never fails a flow: it is logged and the flow goes on. A pull request of a code host that is no longer on
(its secret unset since) gets no report."""

from __future__ import annotations

import logging

from orchestrator.flows import comments
from orchestrator.flows.records import set_fields
from orchestrator.plugin_api.codehost import CodeHost, CodeHostError
from orchestrator.rendering.plugin_host import CodeHosts
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, PullRequestEvent
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.flows.reporting")
CODEHOST_ERRORS = (CodeHostError, ValueError, KeyError)


class Reporter:
    def __init__(self, codehosts: CodeHosts, store: DeploymentStore, settings: Settings) -> None:
        self._codehosts = codehosts
        self._store = store
        self._settings = settings

    def _host(self, event: PullRequestEvent) -> CodeHost | None:
        if event.local or event.is_base:
            return None  # no pull request to report to (a base preview's is the list and the dashboard)
        host = self._codehosts.get(event.codehost)
        if host is None:
            log.warning("code host %s is not on: nothing reported", event.codehost,
                        extra={"deploymentId": event.deployment_id})
        return host

    def comment(self, event: PullRequestEvent, comment_id: int | None, body: str) -> int | None:
        """Create or edit the pull request's one comment; returns its id (kept on the record)."""
        host = self._host(event)
        if host is None:
            return None
        try:
            new_id = host.upsert_comment(event.repo_owner, event.repo_name, event.pr_number, comment_id,
                                         comments.with_trigger(body, event.trigger, event.command,
                                                               event.command_author))
        except CODEHOST_ERRORS as exc:
            log.warning("comment not posted: %s", exc, extra={"deploymentId": event.deployment_id})
            return comment_id
        if new_id != comment_id:
            set_fields(self._store, event.deployment_id, touch=False, commentId=new_id)
        return new_id

    def refuse(self, event: PullRequestEvent, message: str) -> None:
        """One comment per pull request, also for refusals: there is no record to remember it, so the service's
        earlier comment is looked up on the code host and edited."""
        if self._host(event) is None:
            return
        self.comment(event, self.marked_comment(event), comments.refused(message))

    def marked_comment(self, event: PullRequestEvent) -> int | None:
        """The service's earlier comment on the pull request when no record remembers it (a refusal's), or None."""
        host = self._host(event)
        if host is None:
            return None
        try:
            return host.find_marked_comment(event.repo_owner, event.repo_name, event.pr_number, comments.MARKER)
        except CODEHOST_ERRORS as exc:
            log.warning("comments not listed: %s", exc, extra={"deploymentId": event.deployment_id})
            return None

    def start(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> int | None:
        """The commit's status `in_progress`: on a code-host deployment for this commit where the host has them
        (its id is returned and kept on the record; the previous commit's becomes inactive), else on the commit."""
        host = self._host(event)
        if host is None or not self._settings.codehost_deployments or not event.commit_sha:
            return None
        environment = f"preview/{event.project_slug}/pr-{event.pr_number}"
        try:
            new_id = host.start_deployment(event.repo_owner, event.repo_name, event.commit_sha, environment,
                                           f"Preview of pull request #{event.pr_number}")
        except CODEHOST_ERRORS as exc:
            log.warning("deployment not reported: %s", exc, extra={"deploymentId": event.deployment_id})
            return None
        if new_id is not None:
            set_fields(self._store, event.deployment_id, touch=False, codehostDeploymentId=new_id)
            previous = existing.codehostDeploymentId if existing else None
            if previous is not None and previous != new_id:
                self.status(event, previous, "inactive", "Superseded by a newer commit")
        self.status(event, new_id, "in_progress", "Building the preview")
        return new_id

    def status(self, event: PullRequestEvent, deployment: int | None, state: str, description: str,
               environment_url: str | None = None, sha: str | None = None) -> None:
        """`state` of the preview of the event's commit, or of `sha` (plugin_api.codehost.STATES), on `deployment`
        where the host made one."""
        host = self._host(event)
        if host is None or not self._settings.codehost_deployments:
            return
        try:
            host.set_status(event.repo_owner, event.repo_name, sha or event.commit_sha, deployment, state,
                            description, environment_url)
        except CODEHOST_ERRORS as exc:
            log.warning("deployment status %s not reported: %s", state, exc,
                        extra={"deploymentId": event.deployment_id})
