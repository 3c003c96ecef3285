"""`/preview …` commands written in a pull request's comments (events/commands.py reads them): who may run one,
and what each does.

Only people who may write to the repository run commands (the code host's answer, kept PERMISSION_SECONDS): anyone
else gets one short reply per pull request an hour, and nothing changes; a writer's unknown command, or one with
nothing to act on, gets a reply saying why.
A command that acts answers through the pull request's sticky comment — its flow edits it, with a last line saying
who started it:

    redeploy → the deploy flow again, same commit        destroy  → the cleanup flow
    reset-db → the runtime's reset_database, then a restart (restart.py: the database as a new preview's)
    extend   → the record's updatedAt moves (CLEANUP_TTL_DAYS counts again), and a reply says until when
    approve  → a fork's pull request (ALLOW_FORK_PRS=false) deployed at the commit named in full, if that is still its
               head as the code host says
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.common.flow_control import FlowControl
from orchestrator.flows.change_event import event_of
from orchestrator.flows.cleanup import CleanupFlow
from orchestrator.flows.context import FlowContext, StepFailed
from orchestrator.flows.data_steps import snapshot_path, snapshot_refusal
from orchestrator.flows.deploy import DeployFlow
from orchestrator.flows.handler import FlowError
from orchestrator.flows.records import set_fields
from orchestrator.flows.reporting import CODEHOST_ERRORS, Reporter
from orchestrator.plugin_api.codehost import CodeHost
from orchestrator.plugin_api.deliveries import WebhookRejected
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.plugin_api.runtime import RuntimeFailure
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.state.records import DeploymentRecord, PullRequestEvent, event_for_record

log = logging.getLogger("orchestrator.flows.commands")
PERMISSION_SECONDS = 60.0
REFUSAL_REPLY_SECONDS = 3600.0
# The commands and what each does (the reply to an unknown one lists them): events/commands.py's COMMANDS.
USAGE = ("`/preview redeploy` · `/preview destroy` · `/preview reset-db` · `/preview extend` · "
         "`/preview approve COMMIT`")


class CommandFlow:
    def __init__(self, context: FlowContext, reporter: Reporter, deploy: DeployFlow, cleanup: CleanupFlow) -> None:
        self.c = context
        self.reporter = reporter
        self.deploy = deploy
        self.cleanup = cleanup
        self._permissions: dict[tuple[str, str, str], tuple[bool, float]] = {}
        self._refused: dict[tuple[str, str, int, str], float] = {}  # (host, repository, pull request, user) -> when
        self._lock = threading.Lock()

    def run(self, event: PullRequestEvent, existing: DeploymentRecord | None, control: FlowControl) -> None:
        host = self.c.codehosts.get(event.codehost)
        if host is None and event.trigger != "operator":
            log.warning("command of a code host that is not on: not run", extra={"deploymentId": event.deployment_id})
            return
        name, author = event.command or "", event.command_author or "?"
        # Who asks comes first: anyone may comment, and only people who may write get more than one answer. The
        # operator (the API) needs no one's permission.
        if event.trigger != "operator" and not self._may_write(host, event, author):
            log.info("/preview %s of %s refused: no write permission", name[:40], author,
                     extra={"deploymentId": event.deployment_id})
            if self._first_refusal(host.name, event, author):
                self._reply(host, event, f"`/preview` commands need write permission on {event.repo_owner}/"
                                         f"{event.repo_name}: nothing was done.")
            return
        act = {"redeploy": self._redeploy, "destroy": self._destroy, "reset-db": self._reset_db,
               "extend": self._extend, "approve": self._approve}.get(name)
        if act is None:  # never echoed: the word is the commenter's
            self._reply(host, event, f"That is not a `/preview` command. The commands: {USAGE}.")
            return
        log.info("/preview %s by %s", name, author, extra={"deploymentId": event.deployment_id})
        act(host, event, existing, control)

    # The commands ---------------------------------------------------------------------------------------

    def _redeploy(self, host: CodeHost | None, event: PullRequestEvent, existing: DeploymentRecord | None,
                  control: FlowControl) -> None:
        if existing is None:
            self._reply(host, event, "There is no preview to redeploy: a push deploys the pull request.")
            return
        self.deploy.run(self._update(event, existing), existing, control)

    def _destroy(self, host: CodeHost | None, event: PullRequestEvent, existing: DeploymentRecord | None,
                 control: FlowControl) -> None:
        if existing is None:
            self._reply(host, event, "There is no preview to destroy.")
            return
        closing = event_for_record(existing, "closed", event.delivery_id)
        self.cleanup.run(closing.model_copy(update=self._started_by(event)), existing)

    def _reset_db(self, host: CodeHost | None, event: PullRequestEvent, existing: DeploymentRecord | None,
                  control: FlowControl) -> None:
        target = self.c.target(event.project_slug, event.pr_number, event.deployment_id)
        compose_file = target.compose_file()
        if existing is None or compose_file is None:
            self._reply(host, event, "There is no preview whose database could be reset.")
            return
        if not self.c.runtime.can_reset_database:
            self._reply(host, event, f"The {self.c.runtime.name} runtime cannot reset a preview's database.")
            return
        update = self._update(event, existing)
        refused = self._seed_refusal(update, target.work_dir)
        if refused:  # the deploy after the reset would refuse the seed: the preview keeps the data it has
            self._reply(host, event, f"The database was not reset: {refused}.")
            return
        try:
            self.c.runtime.reset_database(event.deployment_id, compose_file, target.log)
        except RuntimeFailure as exc:
            self._reply(host, event, f"The database was not reset: {exc.message}.")
            raise FlowError(exc.message) from None
        self.deploy.run(update, existing, control, restart=True)

    def _seed_refusal(self, update: PullRequestEvent, work_dir: Path) -> str | None:
        """Why the deploy that follows a reset would refuse the preview's seed (its commit's configuration, in the
        checkout the last deploy left), or None; a configuration that does not load is the deploy's to report."""
        try:
            config = load_checkout_config(self.c.plugins, work_dir)
        except (ConfigError, OSError):
            return None
        if config.seed is None or config.seed.snapshot is None:
            return None
        refused = snapshot_refusal(update)
        if refused:
            return refused
        try:  # the operator's folder still names the repository and still keeps that snapshot
            snapshot_path(self.c.settings.snapshots_path, update.project_slug, update, str(config.seed.snapshot))
        except StepFailed as exc:
            return exc.message
        return None

    def _extend(self, host: CodeHost | None, event: PullRequestEvent, existing: DeploymentRecord | None,
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

    def _approve(self, host: CodeHost | None, event: PullRequestEvent, existing: DeploymentRecord | None,
                 control: FlowControl) -> None:
        if host is None:
            raise FlowError("/preview approve: the pull request's code host is not on")
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
        # The whole commit id: what the maintainer reviewed, not whatever the fork's author pushes meanwhile (nor
        # a commit made to share a short prefix with it).
        pinned = (event.command_argument or "").lower()
        if pinned != (change.head_sha or "-"):
            head = change.head_sha or "unknown"
            self._reply(host, event, ("`/preview approve` needs the full id of the commit you reviewed" if not pinned
                                      else "That is not the pull request's head") +
                        f": nothing was deployed. The head is {head}: `/preview approve {head}` once you reviewed it.")
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
        """What the flow's comment says started it: a comment's command, or the operator's (the API)."""
        return {"trigger": "operator" if event.trigger == "operator" else "command", "command": event.command,
                "command_author": event.command_author}

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
            if self._first_refusal(host.name, event, author):
                self._reply(host, event, "The service could not ask the code host who may run commands; nothing "
                                         "was done (the operator sees why in its log).")
            raise FlowError(f"/preview: the code host did not say whether {author} may write ({exc})") from None
        with self._lock:
            self._permissions[key] = (allowed, now)
        return allowed

    def _first_refusal(self, codehost: str, event: PullRequestEvent, author: str) -> bool:
        """Whether to answer a refused command: once per user and pull request an hour, so that commenting cannot
        make the service spend its API requests."""
        key = (codehost, f"{event.repo_owner}/{event.repo_name}".lower(), event.pr_number, author.lower())
        now = time.monotonic()
        with self._lock:
            if now - self._refused.get(key, -REFUSAL_REPLY_SECONDS) < REFUSAL_REPLY_SECONDS:
                return False
            if len(self._refused) > 10_000:
                self._refused.clear()
            self._refused[key] = now
            return True

    def _reply(self, host: CodeHost | None, event: PullRequestEvent, text: str) -> None:
        """A short new comment: the answer to a command that did not act (nothing on the record changes). The
        operator's command (the API) is answered by its failure instead."""
        if event.trigger == "operator" or host is None:
            raise FlowError(text)
        try:
            host.reply(event.repo_owner, event.repo_name, event.pr_number, f"@{event.command_author}: {text}")
        except CODEHOST_ERRORS as exc:
            log.warning("reply not posted: %s", exc, extra={"deploymentId": event.deployment_id})
