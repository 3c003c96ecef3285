"""Linked previews (preview-config.yml `links`; docs/routing.md): each link resolves to the linked repository's
preview of the same head branch, else its base preview (BASE_PREVIEWS), else to nothing, and the preview's
services get PREVIEW_LINK_{AS}_URL. A repository the service does not allow cannot be linked. `relinks` finds the
previews whose links now resolve elsewhere (a linked preview appeared, moved or went away): each is restarted at
its own commit with the new values (restart.py: nothing built)."""

from __future__ import annotations

import logging
import time

from orchestrator.common.naming import repository_entry, repository_identity
from orchestrator.flows.context import FlowContext, StepFailed
from orchestrator.plugin_api.preview_links import LinkConfig
from orchestrator.state.records import DeploymentRecord, PreviewLink, PullRequestEvent, event_for_record

log = logging.getLogger("orchestrator.flows.links")
SERVING = ("running", "sleeping")  # a linked preview a request can reach (a sleeping one wakes)


class Links:
    def __init__(self, context: FlowContext) -> None:
        self.c = context

    def resolve(self, links: list[LinkConfig], branch: str | None, own_repository: str) -> list[PreviewLink]:
        """Each link as it resolves now; StepFailed for a repository the service does not allow."""
        refused = [link.repo for link in links if not self._allowed(link.repo)]
        if refused:
            raise StepFailed(f"links: {', '.join(refused)} not in ALLOWED_REPOS: a preview links only to "
                             "repositories this service allows")
        records = list(self.c.store.read().deployments.values())
        return [self._one(link, branch, own_repository, records) for link in links]

    def _one(self, link: LinkConfig, branch: str | None, own: str, records: list[DeploymentRecord]) -> PreviewLink:
        identity = _identity(link.repo)
        theirs = [r for r in records if r.repository == identity and r.status in SERVING and r.repository != own]
        chosen = next((r for r in theirs if not r.is_base and branch and r.branch == branch), None) or \
            next((r for r in theirs if r.is_base), None)
        return PreviewLink(name=link.name, repo=link.repo, deploymentId=chosen.deploymentId if chosen else None,
                           url=chosen.url if chosen else None)

    def _allowed(self, repo: str) -> bool:
        host, path = repository_entry(repo)
        return path in self.c.settings.allowed_for(host)

    def relinks(self) -> list[tuple[PullRequestEvent, str]]:
        """A restart at its own commit for every running or sleeping preview whose links resolve elsewhere now."""
        found = []
        records = list(self.c.store.read().deployments.values())
        for record in records:
            if not record.links or record.status not in SERVING:
                continue
            now = [self._one(LinkConfig(repo=link.repo, name=link.name), record.branch, record.repository, records)
                   if self._allowed(link.repo) else link for link in record.links]
            if [link.url for link in now] == [link.url for link in record.links]:
                continue
            event = event_for_record(record, "synchronize", f"relink-{record.deploymentId}-{time.time_ns()}")
            moved = ", ".join(f"{link.name} → {link.deploymentId or 'none'}" for link in now)
            found.append((event.model_copy(update={"trigger": "relink"}),
                          f"links resolve elsewhere now ({moved}): restarted at its commit"))
        return found


def _identity(repo: str) -> str:
    host, path = repository_entry(repo)
    owner, _, name = path.rpartition("/")
    return repository_identity(host, owner, name)
