"""Base previews (BASE_PREVIEWS): a standing preview of each named repository's default branch, `{slug}-base`.

Looked at when the service starts and every RECONCILE_INTERVAL_MINUTES: the repository's clone URL (its base
preview's record, else the code host's API once), then its default branch and head through git (`git ls-remote
--symref`: no API call, no clone). What that look finds is queued through the inbox like a delivery:

- no base preview yet (never made, removed by DELETE, refused by MAX_CONCURRENT_PREVIEWS) → `opened`; its head moved
  (and no deploy of it runs) → `synchronize`. A deploy that failed is tried again when the branch moves (or after
  a DELETE), as a pull request's is after a push;
- a base preview of a repository no longer in BASE_PREVIEWS → `closed`.

A base preview has no pull request: nothing is commented or reported on the code host; the list, the dashboard
and its deployment log say how it goes. The TTL never removes it (flows/reconcile.py `expired`).
"""

from __future__ import annotations

import logging
import time

from orchestrator.adapters.git import CloneRefused
from orchestrator.common.commands import CommandFailed
from orchestrator.common.naming import BASE, deployment_id, project_slug, repository_identity
from orchestrator.flows.change_event import base_event
from orchestrator.flows.context import FlowContext
from orchestrator.plugin_api.codehost import CodeHost, CodeHostError
from orchestrator.plugin_api.deliveries import WebhookRejected
from orchestrator.state.records import DeploymentRecord, DeploymentTaken, PullRequestEvent, event_for_record

log = logging.getLogger("orchestrator.flows.base_previews")

Due = tuple[PullRequestEvent, str]  # an event to queue, and what the log says of it


class BasePreviews:
    def __init__(self, context: FlowContext) -> None:
        self.c = context

    def due(self) -> list[Due]:
        """The events that bring every base preview to its default branch's head (or remove it)."""
        found: list[Due] = []
        wanted: set[str] = set()  # the repositories' identities
        for host in self.c.codehosts:
            for repository in sorted(self.c.settings.base_for(host.name)):
                owner, _, name = repository.rpartition("/")
                try:
                    slug = project_slug(owner, name)
                except ValueError:
                    continue  # refused as a pull request's repository would be
                wanted.add(repository_identity(host.name, owner, name))
                if (event := self._look(host, owner, name, slug)) is not None:
                    found.append(event)
        for record in self.c.store.read().deployments.values():
            if record.is_base and record.repository not in wanted and record.status != "building":
                event = event_for_record(record, "closed", f"base-closed-{record.deploymentId}-"
                                                           f"{int(record.createdAt.timestamp())}")
                found.append((event, f"{record.repoOwner}/{record.repoName} is not in BASE_PREVIEWS: its base "
                                     "preview is removed"))
        return found

    def _look(self, host: CodeHost, owner: str, name: str, slug: str) -> Due | None:
        record = self.c.store.read().deployments.get(deployment_id(slug, BASE))
        if record is not None and record.repository != repository_identity(host.name, owner, name):
            log.warning("%s %s/%s: no base preview: %s", host.name, owner, name,
                        DeploymentTaken(record.repoOwner, record.repoName, record.deploymentId).message)
            return None
        if record is not None and record.status == "building":
            return None  # a deploy of it runs: the next look sees what came of it
        try:
            clone_url = record.cloneUrl if record is not None and record.cloneUrl else host.clone_url(owner, name)
            if clone_url is None:
                log.warning("%s %s/%s: no clone URL for its base preview", host.name, owner, name)
                return None
            branch, sha = self.c.git.remote_head(clone_url, host.name)
        except (CodeHostError, CloneRefused, CommandFailed, ValueError) as exc:
            log.warning("%s %s/%s: the default branch's head is unknown (%s); its base preview stays as it is",
                        host.name, owner, name, exc)
            return None
        if record is not None and record.commitSha == sha and record.branch == branch:
            return None
        action = "opened" if record is None else "synchronize"
        try:
            # Each look's own id: a preview removed (DELETE) or refused (the limit) is made again at the next look
            event = base_event(host.name, owner, name, branch, sha, clone_url, action,
                               f"base-{host.name}-{owner}/{name}-{sha[:12]}-{time.time_ns()}", trigger="reconcile")
        except WebhookRejected as rejected:
            log.warning("%s %s/%s: no base preview: %s", host.name, owner, name, rejected.message)
            return None
        moved = "has no base preview" if record is None else f"moved to {sha[:7]} (its base preview is at " \
                                                             f"{_short(record)})"
        return event, f"{owner}/{name}: {branch} {moved}; {action} queued"


def _short(record: DeploymentRecord) -> str:
    return record.commitSha[:7] or "nothing"
