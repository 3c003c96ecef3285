"""What the HTTP API takes and answers (its OpenAPI schemas are generated from these): the bodies of its endpoints
and the delivery log's entries."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.common.naming import SHA_PATTERN, branch_problem
from orchestrator.state.records import DeploymentRecord


class LocalPreviewRequest(BaseModel):
    """`POST /api/previews`: deploy a git repository of this host (what `preview-orchestrator up` sends)."""

    model_config = ConfigDict(extra="forbid", title="LocalPreviewRequest")

    path: str = Field(max_length=4096, description="Absolute path of a git repository on the service's host")
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$", description="Names the preview: local-{name}")
    pr: int = Field(default=1, ge=1, le=56_000, description="The number in the preview's id and URL")
    branch: str = Field(description="Branch of the repository to deploy")
    sha: str = Field(description="Commit to deploy (the branch's head)")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value or any(ord(c) < 0x20 for c in value):
            raise ValueError("must be an absolute path")
        return value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str) -> str:
        if problem := branch_problem(value):
            raise ValueError(f"branch name {problem}")
        return value

    @field_validator("sha")
    @classmethod
    def _sha(cls, value: str) -> str:
        if not SHA_PATTERN.match(value):
            raise ValueError("must be a 40 or 64 character lowercase hex commit SHA")
        return value


class LocalPreviewAccepted(BaseModel):
    model_config = ConfigDict(title="LocalPreviewAccepted")

    status: Literal["ok"] = "ok"
    deploymentId: str
    url: str


class ErrorBody(BaseModel):
    model_config = ConfigDict(title="Error")

    error: str


class StatusOk(BaseModel):
    model_config = ConfigDict(title="StatusOk")

    status: Literal["ok"] = "ok"


class CleanupResult(BaseModel):
    model_config = ConfigDict(title="CleanupResult")

    status: Literal["ok"] = "ok"
    message: str = Field(description="Preview <deploymentId> cleaned up")


class Health(BaseModel):
    model_config = ConfigDict(title="Health")

    status: Literal["ok"] = "ok"
    timestamp: datetime
    uptime: float = Field(description="Seconds since the service started (fractional)")


class DeploymentList(BaseModel):
    model_config = ConfigDict(title="DeploymentList")

    deployments: list[DeploymentRecord]


class PluginInfo(BaseModel):
    model_config = ConfigDict(title="PluginInfo")

    name: str
    distribution: str | None
    version: str | None
    builtin: bool
    hooks: list[str]
    frameworks: list[str]
    databases: list[str]
    services: list[str]
    runtimes: list[str] = Field(default_factory=list)
    codehosts: list[str] = Field(default_factory=list)


class PluginList(BaseModel):
    model_config = ConfigDict(title="PluginList")

    plugins: list[PluginInfo]


DeliveryOutcome = Literal["accepted", "ignored", "duplicate", "stale", "refused"]


class DeliveryLogEntry(BaseModel):
    """One webhook the service received (the delivery log, `GET /api/deliveries`)."""

    model_config = ConfigDict(title="DeliveryLogEntry", frozen=True)

    id: int = Field(description="Its number in the log: what `POST /api/deliveries/{id}/replay` takes")
    receivedAt: str = Field(description="When it was received (ISO 8601, UTC)")
    codehost: str
    deliveryId: str | None = Field(description="The code host's delivery id header (replays: the service's own)")
    event: str | None = Field(description="The code host's event header (pull_request, Merge Request Hook, ...)")
    repository: str | None = Field(description="owner/name, once the delivery was verified and read")
    prNumber: int | None
    action: str | None
    outcome: DeliveryOutcome = Field(description="accepted (queued), ignored (see reason), duplicate (the same "
                                     "delivery id again), stale (older than the pull request's last event), refused")
    status: int = Field(description="The HTTP status answered")
    reason: str | None = Field(description="Why it was ignored or refused; for a replay, which delivery it replays")
    replayable: bool = Field(description="Accepted, and its event still kept")


class DeliveryList(BaseModel):
    model_config = ConfigDict(title="DeliveryList")

    deliveries: list[DeliveryLogEntry]


class ReplayAccepted(BaseModel):
    model_config = ConfigDict(title="ReplayAccepted")

    status: Literal["ok"] = "ok"
    deploymentId: str
    action: str
    deliveryId: str = Field(description="The replayed event's own delivery id (replay-{id}-…)")
    logId: int = Field(description="The replay's entry in the delivery log")
