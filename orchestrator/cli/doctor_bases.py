"""doctor's line on BASE_PREVIEWS: the standing previews a repository's first pull request builds on."""

from __future__ import annotations

from orchestrator.common.naming import repository_entry, repository_identity
from orchestrator.plugin_api.checks import Check
from orchestrator.settings import Settings
from orchestrator.state.store import DeploymentStore, StoreError


def base_previews(settings: Settings) -> Check:
    """BASE_PREVIEWS' standing previews, what the first pull request of each repository builds on: each one's
    state. One not made yet is not a failure (start-up's look makes it); one whose deploy failed is."""
    name = "base previews (BASE_PREVIEWS)"
    try:
        records = DeploymentStore(settings.deployments_db).read().deployments.values()
    except StoreError as exc:
        return Check(name, False, str(exc), "repair the tracking store")
    found = {record.repository: record for record in records if record.is_base}
    states, failed = [], []
    for entry in settings.base_previews:
        host, repository = repository_entry(entry)
        owner, _, repo = repository.rpartition("/")
        record = found.get(repository_identity(host, owner, repo))
        if record is None:
            states.append(f"{entry}: not made yet")
        else:
            states.append(f"{entry}: {record.status} at {record.branch} {record.commitSha[:7] or '-'}")
            if record.status == "failed":
                failed.append(record.deploymentId)
    return Check(name, not failed, "; ".join(states),
                 f"read why: preview-orchestrator logs {failed[0]} (the next push or look tries again)" if failed
                 else "")
