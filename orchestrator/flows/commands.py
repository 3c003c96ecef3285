"""`/preview …` commands written in a pull request's comments (events/commands.py reads them): who may run one,
and what each does.

Only people who may write to the repository run commands (the code host's answer, kept PERMISSION_SECONDS):
anyone else, an unknown command, or one with nothing to act on gets a short reply saying why, and nothing changes.
A command that acts answers through the pull request's sticky comment — its flow edits it, with a last line saying
who started it:

    redeploy → the deploy flow again, same commit        destroy  → the cleanup flow
    reset-db → the runtime's reset_database, then the deploy flow (the database as a new preview's)
    extend   → the record's updatedAt moves (CLEANUP_TTL_DAYS counts again), and a reply says until when
    approve  → a fork's pull request (ALLOW_FORK_PRS=false) deployed at its current head, read from the code host
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from orchestrator.common.flow_control import FlowControl
from orchestrator.flows.change_event import event_of
from orchestrator.flows.cleanup import CleanupFlow
from orchestrator.flows.context import FlowContext
from orchestrator.flows.deploy import DeployFlow
from orchestrator.flows.handler import FlowError
from orchestrator.flows.records import set_fields
from orchestrator.flows.reporting import CODEHOST_ERRORS, Reporter
from orchestrator.plugin_api.codehost import CodeHost, WebhookRejected
from orchestrator.plugin_api.runtime import RuntimeFailure, can_reset_database, reset_database
from orchestrator.state.records import DeploymentRecord, PullRequestEvent, event_for_record

log = logging.getLogger("orchestrator.flows.commands")
PERMISSION_SECONDS = 60.0
# The commands and what each does (the reply to an unknown one lists them): events/commands.py's COMMANDS.
USAGE = ("`/preview redeploy` · `/preview destroy` · `/preview reset-db` · `/preview extend` · "
         "`/preview approve [commit]`")


class CommandFlow:
    def __init__(self, context: FlowContext, reporter: Reporter, deploy: DeployFlow, cleanup: CleanupFlow) -> None:
        self.c = context
        self.reporter = reporter
        self.deploy = deploy
        self.cleanup = cleanup
        self._permissions: dict[tuple[str, str, str], tuple[bool, float]] = {}
        self._lock = threading.Lock()

    def run(self, event: PullRequestEvent, existing: DeploymentRecord | None, control: FlowControl) -> None:
        host = self.c.codehosts.get(event.codehost)
        if host is None:
            log.warning("command of a code host that is not on: not run", extra={"deploymentId": event.deployment_id})
            return
        name, author = event.command or "", event.command_author or "?"
        act = {"redeploy": self._redeploy, "destroy": self._destroy, "reset-db": self._reset_db,
               "extend": self._extend, "approve": self._approve}.get(name)
        if act is None:
            asked = f"`/preview {name}` is not a command" if name else "`/preview` needs a command"
            self._reply(host, event, f"{asked}. The commands: {USAGE}.")
            return
        if not self._may_write(host, event, author):
            log.info("/preview %s of %s refused: no write permission", name, author,
                     extra={"deploymentId": event.deployment_id})
            self._reply(host, event, f"`/preview {name}` needs write permission on "
                                     f"{event.repo_owner}/{event.repo_name}: nothing was done.")
            return
        log.info("/preview %s by %s", name, author, extra={"deploymentId": event.deployment_id})
        act(host, event, existing, control)

    # The commands ---------------------------------------------------------------------------------------

    def _redeploy(self, host: CodeHost, event: PullRequestEvent, existing: DeploymentRecord | None,
                  control: FlowControl) -> None:
        if existing is None:
            self._reply(host, event, "There is no preview to redeploy: a push deploys the pull request.")
            return
        self.deploy.run(self._update(event, existing), existing, control)

    def _destroy(self, host: CodeHost, event: PullRequestEvent, existing: DeploymentRecord | None,
                 control: FlowControl) -> None:
        if existing is None:
            self._reply(host, event, "There is no preview to destroy.")
            return
        closing = event_for_record(existing, "closed", event.delivery_id)
        self.cleanup.run(closing.model_copy(update=self._started_by(event)), existing)

    def _reset_db(self, host: CodeHost, event: PullRequestEvent, existing: DeploymentRecord | None,
                  control: FlowControl) -> None:
        target = self.c.target(event.project_slug, event.pr_number, event.deployment_id)
        compose_file = target.compose_file()
        if existing is None or compose_file is None:
            self._reply(host, event, "There is no preview whose database could be reset.")
            return
        if not can_reset_database(self.c.runtime):
            self._reply(host, event, f"The {self.c.runtime.name} runtime cannot reset a preview's database.")
            return
        try:
            reset_database(self.c.runtime, event.deployment_id, compose_file, target.log)
        except RuntimeFailure as exc:
            self._reply(host, event, f"The database was not reset: {exc.message}.")
            raise FlowError(exc.message) from None
        self.deploy.run(self._update(event, existing), existing, control)

    def _extend(self, host: CodeHost, event: PullRequestEvent, existing: DeploymentRecord | None,
                control: FlowControl) -> None:
        if existing is None:
            self._reply(host, event, "There is no preview to keep longer.")
            return
        set_fields(self.c.store, event.deployment_id, touch=True)
        days = self.c.settings.cleanup_ttl_days
        if days == 0:
            self._reply(host, event, "Previews are not removed for their age here (CLEANUP_TTL_DAYS=0).")
            return
        until = (datetime.now(UTC) + timedelta(days=days)).strftime("%Y-%m-%d %H:%M UTC")
        self._reply(host, event, f"The preview is kept until {until} unless the pull request closes (the "
                                 f"time-to-live of {days} day{'s' if days != 1 else ''} starts again).")

    def _approve(self, host: CodeHost, event: PullRequestEvent, existing: DeploymentRecord | None,
                 control: FlowControl) -> None:
        try:
            change = host.pull_request(event.repo_owner, event.repo_name, event.pr_number)
        except CODEHOST_ERRORS as exc:
            log.warning("pull request not read: %s", exc, extra={"deploymentId": event.deployment_id})
            raise FlowError(f"/preview approve: the pull request could not be read ({exc})") from None
        if change is None:
            self._reply(host, event, f"`/preview approve` is not supported on {host.name}.")
            return
        if not change.open:
            self._reply(host, event, "The pull request is not open: nothing to approve.")
            return
        pinned = event.command_argument
        if pinned and not (len(pinned) >= 7 and (change.head_sha or "").startswith(pinned.lower())):
            self._reply(host, event, f"`{pinned[:40]}` is not the pull request's head ({(change.head_sha or '')[:7]}"
                                     "): nothing was deployed. Approve the commit you reviewed once it is the head.")
            return
        try:
            approved = event_of(event.codehost, change, "opened", event.delivery_id, trigger="command")
        except WebhookRejected as rejected:
            self._reply(host, event, f"The pull request cannot be deployed: {rejected.message}.")
            return
        if not approved.from_fork or self.c.settings.allow_fork_prs:
            self._reply(host, event, "Nothing to approve: this pull request is deployed without approval.")
            return
        approved = approved.model_copy(update=self._started_by(event))
        refusal = self.reporter.marked_comment(approved) if existing is None else None  # one comment: the refusal's
        self.deploy.run(approved, existing, control, comment_id=refusal)

    # Helpers --------------------------------------------------------------------------------------------

    def _update(self, event: PullRequestEvent, existing: DeploymentRecord) -> PullRequestEvent:
        """The preview's own commit deployed again, as an update started by the command."""
        update = event_for_record(existing, "synchronize", event.delivery_id)
        return update.model_copy(update=self._started_by(event))

    @staticmethod
    def _started_by(event: PullRequestEvent) -> dict[str, object]:
        return {"trigger": "command", "command": event.command, "command_author": event.command_author}

    def _may_write(self, host: CodeHost, event: PullRequestEvent, author: str) -> bool:
        key = (host.name, f"{event.repo_owner}/{event.repo_name}".lower(), author.lower())
        now = time.monotonic()
        with self._lock:
            known = self._permissions.get(key)
            if known is not None and now - known[1] < PERMISSION_SECONDS:
                return known[0]
        try:
            allowed = host.can_write(event.repo_owner, event.repo_name, author, event.command_author_id)
        except CODEHOST_ERRORS as exc:
            log.warning("permission of %s not known: %s", author, exc, extra={"deploymentId": event.deployment_id})
            raise FlowError(f"/preview {event.command}: the code host did not say whether {author} may write "
                            f"({exc})") from None
        with self._lock:
            self._permissions[key] = (allowed, now)
        return allowed

    def _reply(self, host: CodeHost, event: PullRequestEvent, text: str) -> None:
        """A short new comment: the answer to a command that did not act (nothing on the record changes)."""
        try:
            host.reply(event.repo_owner, event.repo_name, event.pr_number, f"@{event.command_author}: {text}")
        except CODEHOST_ERRORS as exc:
            log.warning("reply not posted: %s", exc, extra={"deploymentId": event.deployment_id})
