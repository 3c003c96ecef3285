"""Level-triggered against the code host (RECONCILE_INTERVAL_MINUTES): webhooks get lost, so at start-up and then
every interval each code host that can list is asked for the open pull requests of each of its allowed
repositories, and what no webhook said is queued through the inbox like a delivery (the same lanes, one flow per
pull request):

- an open pull request the gating would deploy, with no preview, whose head the service never heard of → `opened`;
- a preview whose head differs from its open pull request's, and the service never heard of that head →
  `synchronize`;
- a preview whose pull request is not in the listing, and the code host says is not open when asked for it alone
  → `closed`.

"Heard of" is the inbox's clock of each pull request (the newest event accepted for it): a preview removed on
purpose (TTL, DELETE, a draft) or a deploy that failed is not started again until its pull request moves on. A
repository whose listing fails, or a host whose rate limit runs low, is left as it is until the next look; a
pull request with work queued or running gets nothing more (`only_if_idle`). Every correction is logged, counted
(`preview_orchestrator_reconcile_corrections`) and said in the pull request's comment (`trigger: reconcile`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from orchestrator.common.naming import deployment_id, project_slug, repository_identity
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.gating import DEPLOY, Gate
from orchestrator.events.inbox import Inbox
from orchestrator.events.periodic import EventScheduler
from orchestrator.flows.change_event import event_of
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import CodeHost, CodeHostError
from orchestrator.plugin_api.deliveries import PullRequestChange, WebhookRejected
from orchestrator.rendering.plugin_host import CodeHosts
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, PullRequestEvent, event_for_record
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.events.codehost_reconcile")
# A preview last deployed this shortly before a listing was asked for is never removed for missing from it: a code
# host's listing may lag behind the webhook it sent a moment before (read replicas).
SETTLE = timedelta(seconds=20)

Correction = tuple[PullRequestEvent, str]


class CodeHostReconcile(EventScheduler):
    name = "code host reconcile"
    check_at_start = True

    def __init__(self, codehosts: CodeHosts, settings: Settings, store: DeploymentStore, inbox: Inbox,
                 dispatcher: Dispatcher, metrics: Metrics) -> None:
        super().__init__(inbox, dispatcher, settings.reconcile_interval_minutes * 60, log)
        self._codehosts = codehosts
        self._settings = settings
        self._store = store
        self._metrics = metrics
        self._gate = Gate.of(settings)

    async def check(self) -> int:
        """One look at every code host; returns how many corrections were queued."""
        queued = 0
        for host in self._codehosts:
            queued += await self._look_at(host)
        return queued

    async def _look_at(self, host: CodeHost) -> int:
        queued = 0
        for repository in sorted(self._settings.allowed_for(host.name)):
            limit = host.rate_limit()
            if limit is not None:
                self._metrics.codehost_rate_limit.labels(host.name).set(limit.remaining)
                if limit.low:
                    log.warning("%s: %d of %d API requests left until the reset; the reconcile waits for the next "
                                "look", host.name, limit.remaining, limit.limit)
                    self._metrics.reconciles.labels(host.name, "rate_limited").inc()
                    break
            owner, name = self._names(host.name, repository)
            listed_at = datetime.now(UTC)
            try:
                listing = await asyncio.to_thread(host.open_pull_requests, owner, name)
            except CodeHostError as exc:
                log.warning("%s %s: open pull requests not listed (%s); its previews are left as they are",
                            host.name, repository, exc)
                self._metrics.reconciles.labels(host.name, "unreachable").inc()
                continue
            if listing is None:
                log.info("%s cannot list open pull requests: its previews follow its webhooks alone", host.name)
                return queued
            corrections = await asyncio.to_thread(self.corrections, host, repository, listing, listed_at)
            for event in await self.queue(corrections, only_if_idle=True):
                self._metrics.reconcile_corrections.labels(host.name, event.action).inc()
                queued += 1
            self._metrics.reconciles.labels(host.name, "done").inc()
        if (limit := host.rate_limit()) is not None:
            self._metrics.codehost_rate_limit.labels(host.name).set(limit.remaining)
        return queued

    def _names(self, codehost: str, repository: str) -> tuple[str, str]:
        """Owner and name as the code host spells them (a record's, from its deliveries), else as ALLOWED_REPOS
        has them in lower case (the hosts' API paths ignore case). GitLab's group path: the name is the last part."""
        for record in self._store.read().deployments.values():
            if record.source == "codehost" and record.codehost == codehost and \
                    f"{record.repoOwner}/{record.repoName}".lower() == repository:
                return record.repoOwner, record.repoName
        owner, _, name = repository.rpartition("/")
        return owner, name

    def corrections(self, host: CodeHost, repository: str, listing: list[PullRequestChange],
                    listed_at: datetime) -> list[Correction]:
        """What a complete listing of `repository`'s open pull requests says the webhooks missed."""
        codehost = host.name
        if foreign := next((c for c in listing if f"{c.owner}/{c.name}".lower() != repository), None):
            # A renamed or transferred repository (GitLab answers the old path with the new project): every preview
            # would look closed, and another repository's pull requests would look like these.
            log.warning("%s %s: the listing names %s/%s; not acted on until ALLOWED_REPOS names it", codehost,
                        repository, foreign.owner, foreign.name)
            return []
        deployments = self._store.read().deployments
        previews = {record.prNumber: record for record in deployments.values()
                    if record.source == "codehost" and record.codehost == codehost and not record.is_base
                    and f"{record.repoOwner}/{record.repoName}".lower() == repository}
        found: list[Correction] = []
        open_numbers = {change.number for change in listing}
        for change in listing:
            try:
                held = deployments.get(deployment_id(project_slug(change.owner, change.name), change.number))
            except ValueError:
                continue  # a name no event could carry either
            if held is not None and previews.get(change.number) is not held:
                continue  # the deployment id is another repository's (their names give the same slug)
            correction = self._for_open(codehost, change, previews.get(change.number))
            if correction is not None:
                found.append(correction)
        for number, record in sorted(previews.items()):
            if number in open_numbers or record.status == "building" or record.updatedAt >= listed_at - SETTLE:
                continue
            if not self._closed(host, record):
                continue
            event = event_for_record(record, "closed", f"reconcile-closed-{record.deploymentId}-"
                                                       f"{int(record.createdAt.timestamp())}")
            found.append((event.model_copy(update={"trigger": "reconcile"}),
                           f"reconcile: pull request #{number} is not open; cleanup queued"))
        return found

    @staticmethod
    def _closed(host: CodeHost, record: DeploymentRecord) -> bool:
        """Whether the code host says the pull request is not open, asked for it alone: a listing pages by
        offset, so a pull request closed between two pages' requests hides an open one from it."""
        try:
            change = host.pull_request(record.repoOwner, record.repoName, record.prNumber)
        except CodeHostError as exc:
            log.warning("%s: pull request #%d not looked at (%s); its preview stays", record.deploymentId,
                        record.prNumber, exc)
            return False
        return change is not None and not change.open

    def _for_open(self, codehost: str, change: PullRequestChange,
                  record: DeploymentRecord | None) -> Correction | None:
        action, _ = self._gate.decide(change)
        if action != DEPLOY or not change.head_sha:
            return None  # a draft, or without the label: the webhook would not have deployed it either
        if record is not None and (record.commitSha == change.head_sha or record.status == "building"):
            return None
        seen = self._inbox.last_seen(repository_identity(codehost, change.owner, change.name), change.number)
        if seen is not None and seen.sha == change.head_sha and seen.action != "closed":
            return None  # heard of: what came of it is on the record and in the comment
        action = "opened" if record is None else "synchronize"
        stamp = int(change.updated_at.timestamp()) if change.updated_at else 0
        try:
            event = event_of(codehost, change, action,
                             f"reconcile-{codehost}-{change.owner}/{change.name}#{change.number}-{action}-"
                             f"{change.head_sha[:12]}-{stamp}", trigger="reconcile")
        except WebhookRejected as rejected:
            log.warning("reconcile: %s/%s#%d not acted on: %s", change.owner, change.name, change.number,
                        rejected.message)
            return None
        what = "has no preview" if record is None else f"is at {change.head_sha[:7]}, its preview at " \
                                                       f"{record.commitSha[:7]}"
        return event, f"reconcile: pull request #{change.number} {what}; {action} queued (no webhook said so)"
