"""Deployment records as the service stores them, for tests that need a tracked preview without a deploy."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.common.naming import deployment_id, project_slug
from orchestrator.state.records import DeploymentRecord, PortAllocation, StoreFile
from orchestrator.state.store import DeploymentStore


def sample_record(pr: int, owner: str = "acme", name: str = "api", **extra: Any) -> DeploymentRecord:
    slug = project_slug(owner, name)
    now = datetime.now(UTC)
    return DeploymentRecord(**{
        "prNumber": pr, "repoName": name, "repoOwner": owner, "projectSlug": slug,
        "deploymentId": deployment_id(slug, pr), "branch": "main", "commitSha": "a" * 40, "framework": "go",
        "dbType": "postgres", "appPort": 8080, "exposedAppPort": 8000 + pr, "exposedDbPort": 9000 + pr,
        "status": "running", "createdAt": now, "updatedAt": now, "url": f"http://x/{slug}/pr-{pr}/", **extra})


def track(store_path: Path, *records: DeploymentRecord) -> None:
    """Put `records` into the tracking store at `store_path` (created when missing), with their ports."""
    def put(data: StoreFile) -> None:
        for record in records:
            data.deployments[record.deploymentId] = record
            data.portAllocations[record.deploymentId] = PortAllocation(exposedAppPort=record.exposedAppPort,
                                                                       exposedDbPort=record.exposedDbPort)

    DeploymentStore(store_path).update(put)
