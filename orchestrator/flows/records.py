"""How the flows change the tracking store: begin a deployment (limit, ports, `building`), set fields, forget."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.state.ports import PortAllocationError, allocate, routed_ports
from orchestrator.state.records import DeploymentRecord, PreviewRoute, PullRequestEvent, StoreFile
from orchestrator.state.store import DeploymentStore


def set_fields(store: DeploymentStore, deployment_id: str, touch: bool = True, **fields: object) -> None:
    """Update fields of a record if it still exists; `touch` also moves `updatedAt` (the TTL's clock)."""
    def change(data: StoreFile) -> None:
        record = data.deployments.get(deployment_id)
        if record is not None:
            update = {**fields, "updatedAt": datetime.now(UTC)} if touch else fields
            data.deployments[deployment_id] = record.model_copy(update=update)

    store.update(change)


def mark_lost(store: DeploymentStore, record: DeploymentRecord, why: str) -> bool:
    """`failed` with `why`, only if the record is still the running one read before (no flow began since)."""
    return _while_still_running(store, record, {"status": "failed", "error": why})


def mark_sleeping(store: DeploymentStore, record: DeploymentRecord, now: datetime) -> bool:
    """`sleeping` since `now`, only if the record is still the running one read before (no flow began since).
    `updatedAt` stays: it is the TTL's clock, and sleeping is no deploy."""
    return _while_still_running(store, record, {"status": "sleeping", "sleptAt": now})


def _while_still_running(store: DeploymentStore, record: DeploymentRecord, fields: dict[str, object]) -> bool:
    """Apply `fields` only if the record is still `running` at the `updatedAt` read before: a deploy that began
    meanwhile wins. Returns whether they were applied."""
    def change(data: StoreFile) -> bool:
        current = data.deployments.get(record.deploymentId)
        if current is None or current.status != "running" or current.updatedAt != record.updatedAt:
            return False
        data.deployments[record.deploymentId] = current.model_copy(update=fields)
        return True

    return store.update(change)


def begin(store: DeploymentStore, event: PullRequestEvent, comment_id: int | None, url: str, limit: int,
          limit_message: str, ports_in_use: Callable[[], set[int]]) -> DeploymentRecord:
    """Atomically: check the limit, keep or allocate ports, and record the deployment as building."""
    # Asking the runtime which ports are taken takes a moment; an update keeps its ports and skips it.
    kept = event.deployment_id in store.read().portAllocations
    in_use: set[int] = set() if kept else ports_in_use()
    now = datetime.now(UTC)

    def change(data: StoreFile) -> DeploymentRecord:
        previous = data.deployments.get(event.deployment_id)
        allocation = data.portAllocations.get(event.deployment_id)
        if previous is None and len(data.deployments) >= limit:
            raise PortAllocationError(limit_message)
        if allocation is None:
            others = [a for key, a in data.portAllocations.items() if key != event.deployment_id]
            allocation = allocate(event.pr_number, others, in_use)
            data.portAllocations[event.deployment_id] = allocation
        record = DeploymentRecord(
            prNumber=event.pr_number, repoName=event.repo_name, repoOwner=event.repo_owner,
            projectSlug=event.project_slug, deploymentId=event.deployment_id, branch=event.branch or "",
            commitSha=event.commit_sha or "", framework=previous.framework if previous else None,
            dbType=previous.dbType if previous else None, appPort=previous.appPort if previous else None,
            exposedAppPort=allocation.exposedAppPort, exposedDbPort=allocation.exposedDbPort,
            status="building", createdAt=previous.createdAt if previous else now, updatedAt=now,
            url=url,
            commentId=comment_id if comment_id is not None else (previous.commentId if previous else None),
            cloneUrl=event.clone_url, error=None, source=event.source, codehost=event.codehost,
            # What an event the service makes from the record (reset-db, redeploy) says of the head repository.
            # The event's own, never an older one: an event that names none leaves it unknown (no snapshot), so a
            # same-repository value can never outlive a change that did not say where its head is.
            headRepository=event.head_repo_full_name,
            # its routed services until this deploy's render gives them again (a failure before keeps them, as their
            # ports and locations are kept)
            routes=previous.routes if previous else [],
            links=previous.links if previous else [],
            # a new preview's secrets are keyed by its repository; an older one's stay as its volume has them
            secretsScope=previous.secretsScope if previous else "repository",
        )
        data.deployments[event.deployment_id] = record
        return record

    return store.update(change)


def route_ports(store: DeploymentStore, deployment_id: str, routes: list[str],
                ports_in_use: Callable[[], set[int]]) -> dict[str, int]:
    """Atomically: a host port for each routed service of the deployment (kept across updates; a route no longer
    in the compose file gives its port back). Raises PortAllocationError."""
    current = store.read().portAllocations.get(deployment_id)
    if current is not None and set(current.routedPorts) == set(routes):
        return dict(current.routedPorts)  # an update of the same routes: nothing to ask the runtime
    in_use = ports_in_use() if routes else set()

    def change(data: StoreFile) -> dict[str, int]:
        allocation = data.portAllocations.get(deployment_id)
        if allocation is None:
            raise PortAllocationError(f"Deployment {deployment_id} has no ports (it was removed meanwhile)")
        others = [a for key, a in data.portAllocations.items() if key != deployment_id]
        allocation = routed_ports(allocation, routes, others, in_use)
        data.portAllocations[deployment_id] = allocation
        return dict(allocation.routedPorts)

    return store.update(change)


def routes_of(store: DeploymentStore, deployment_id: str) -> list[PreviewRoute]:
    """The services the preview routes besides the app, as its last render gave them ports."""
    record = store.read().deployments.get(deployment_id)
    return list(record.routes) if record else []


def forget(store: DeploymentStore, deployment_id: str) -> None:
    """The record and its ports, once nothing of the deployment is left."""
    def change(data: StoreFile) -> None:
        data.deployments.pop(deployment_id, None)
        data.portAllocations.pop(deployment_id, None)

    store.update(change)
