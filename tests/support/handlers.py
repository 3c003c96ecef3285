"""A stand-in for the deploy engine: records every event it handles and keeps the store in step.

Used in-process by the HTTP tests and, through EVENT_HANDLER=tests.support.handlers:from_env, by a real
service process in the live tests.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.common.flow_control import FlowControl
from orchestrator.flows.handler import FlowError
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, PortAllocation, PullRequestEvent, StoreFile
from orchestrator.state.store import DeploymentStore


class RecordingHandler:
    def __init__(
        self,
        store: DeploymentStore,
        journal: Path,
        gate: Path | None = None,
        fail_message: str | None = None,
        delay: float = 0.0,
        keep_store: bool = True,
    ) -> None:
        self.keep_store = keep_store
        self.store = store
        self.journal = journal
        self.gate = gate
        self.fail_message = fail_message
        self.delay = delay
        self._lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def handle(self, event: PullRequestEvent, control: FlowControl | None = None) -> None:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self._note("start", event)
            while self.gate is not None and not self.gate.exists():
                time.sleep(0.02)
            time.sleep(self.delay)
            if self.fail_message:
                raise FlowError(self.fail_message)
            if self.keep_store:
                self.store.update(lambda data: _apply(data, event))
            self._note("done", event)
        finally:
            with self._lock:
                self.active -= 1

    def entries(self, phase: str = "done") -> list[dict[str, str]]:
        if not self.journal.exists():
            return []
        lines = [json.loads(line) for line in self.journal.read_text().splitlines() if line]
        return [line for line in lines if line["phase"] == phase]

    def _note(self, phase: str, event: PullRequestEvent) -> None:
        line = {
            "phase": phase,
            "delivery": event.delivery_id,
            "action": event.action,
            "deploymentId": event.deployment_id,
            "sha": event.commit_sha or "",
            "codehost": event.codehost,
            "repository": event.repository,
            "branch": event.branch or "",
            "clone": event.clone_url or "",
        }
        with self._lock, self.journal.open("a") as handle:
            handle.write(json.dumps(line) + "\n")


def _apply(data: StoreFile, event: PullRequestEvent) -> None:
    if event.action == "closed":
        data.deployments.pop(event.deployment_id, None)
        data.portAllocations.pop(event.deployment_id, None)
        return
    now = datetime.now(UTC)
    previous = data.deployments.get(event.deployment_id)
    data.deployments[event.deployment_id] = DeploymentRecord(
        prNumber=event.pr_number,
        repoName=event.repo_name,
        repoOwner=event.repo_owner,
        projectSlug=event.project_slug,
        deploymentId=event.deployment_id,
        branch=event.branch or "",
        commitSha=event.commit_sha or "",
        framework="nestjs",
        dbType="postgres",
        appPort=3000,
        exposedAppPort=8000 + event.pr_number,
        exposedDbPort=9000 + event.pr_number,
        status="running",
        createdAt=previous.createdAt if previous else now,
        updatedAt=now,
        url=f"http://localhost/{event.project_slug}/pr-{event.pr_number}/",
        commentId=None,
        source=event.source,
        codehost=event.codehost,
    )
    data.portAllocations[event.deployment_id] = PortAllocation(
        exposedAppPort=8000 + event.pr_number, exposedDbPort=9000 + event.pr_number
    )


def from_env(settings: Settings, plugins: object = None, metrics: object = None) -> RecordingHandler:
    """Factory for EVENT_HANDLER: journal and gate paths come from TEST_JOURNAL and TEST_GATE."""
    gate = os.environ.get("TEST_GATE")
    return RecordingHandler(
        store=DeploymentStore(settings.deployments_db),
        journal=Path(os.environ["TEST_JOURNAL"]),
        gate=Path(gate) if gate else None,
        delay=float(os.environ.get("TEST_DELAY", "0")),
        keep_store=os.environ.get("TEST_KEEP_STORE", "true") == "true",
    )
