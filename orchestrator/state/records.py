"""Pydantic models at the service's edges: events, records and the store file (the HTTP API's bodies are
http_bodies.py's; a code host's webhook payloads are its plugin's: orchestrator/codehosts/)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from orchestrator.common.naming import BASE, CODEHOST, preview_subject, repository_identity

# `sleeping`: idle for PREVIEW_IDLE_MINUTES, its containers stopped (data, ports and route kept) until the next
# request through nginx wakes it (docs/routing.md).
DeploymentStatus = Literal["building", "running", "failed", "sleeping"]
PullRequestAction = Literal["opened", "reopened", "synchronize", "closed"]
# What the inbox carries: a pull request's actions, and the service's own `sleep` and `wake` of a preview (so that
# they run one at a time with the pull request's other work).
# `command`: a `/preview …` command written in a comment on the pull request (flows/commands.py).
EventAction = Literal["opened", "reopened", "synchronize", "closed", "sleep", "wake", "command"]
HANDLED_ACTIONS: frozenset[str] = frozenset({"opened", "reopened", "synchronize", "closed"})
# What queued an event other than a code host's delivery: the reconcile with the code host (a change no webhook
# reported), a replay from the delivery log, a `/preview` command in a comment, or the operator through the API
# (`POST /api/previews/{id}/reset-db`: a command that needs no one's permission), or a linked preview that appeared,
# moved or went away (a restart: flows/restart.py). The pull request's comment says so.
EventTrigger = Literal["reconcile", "replay", "command", "operator", "relink"]
# Where a preview comes from: a code host's pull request, or `preview-orchestrator up` on this host.
PreviewSource = Literal["codehost", "local"]
LOCAL_OWNER = "local"

MAX_PR_NUMBER = 2**31 - 1


class PullRequestEvent(BaseModel):
    """A validated, allowed pull-request event as the inbox keeps it (small: never the raw body)."""

    delivery_id: str
    action: EventAction
    deployment_id: str
    project_slug: str
    repo_owner: str
    repo_name: str
    pr_number: int
    branch: str | None = None
    commit_sha: str | None = None
    clone_url: str | None = None
    head_repo_full_name: str | None = None
    base_ref: str | None = None
    received_at: datetime
    source: PreviewSource = "codehost"
    codehost: str = CODEHOST  # which code host's pull request (source `codehost`): a code host plugin's name
    # The pull request's `updated_at` as the delivery says: an event older than one already accepted for the pull
    # request is stale (a replay, or a delivery overtaken by a newer one) and is not acted on (events/inbox.py).
    pr_updated_at: datetime | None = None
    trigger: EventTrigger | None = None  # None: the code host's own delivery, or the service's own event
    # action `command`: what was asked (redeploy, destroy, reset-db, extend, approve, or what was not understood),
    # and by whom (the code host's user name, and numeric id where its permission API wants it)
    command: str | None = None
    command_argument: str | None = None  # the word after it (`/preview approve 1a2b3c4`)
    command_author: str | None = None
    command_author_id: int | None = None

    @property
    def local(self) -> bool:
        """Made by `preview-orchestrator up`: no comment and no deployment status on any code host."""
        return self.source == "local"

    @property
    def is_base(self) -> bool:
        """Of the standing preview of the repository's default branch (BASE_PREVIEWS), not of a pull request."""
        return self.pr_number == BASE

    @property
    def repository(self) -> str:
        """The repository's identity (common/naming.py): host, owner and name."""
        return _repository(self.source, self.codehost, self.repo_owner, self.repo_name)

    @property
    def subject(self) -> str:
        """This preview of this repository: what its tokens and wake key are signed for."""
        return preview_subject(self.repository, self.deployment_id)

    @property
    def from_fork(self) -> bool:
        """Head repository differs from the base one (or is gone, as when a fork was deleted)."""
        base = f"{self.repo_owner}/{self.repo_name}".lower()
        return (self.head_repo_full_name or "").lower() != base


def _repository(source: PreviewSource, codehost: str, owner: str, name: str) -> str:
    """A preview's repository identity: `local` for `preview-orchestrator up`, else its code host's name."""
    return repository_identity("local" if source == "local" else codehost, owner, name)


def event_for_record(record: DeploymentRecord, action: EventAction, delivery_id: str) -> PullRequestEvent:
    """An event the service makes itself about a tracked preview (TTL expiry, DELETE, a restart, sleep, wake)."""
    return PullRequestEvent(
        delivery_id=delivery_id, action=action, deployment_id=record.deploymentId,
        project_slug=record.projectSlug, repo_owner=record.repoOwner, repo_name=record.repoName,
        pr_number=record.prNumber, branch=record.branch, commit_sha=record.commitSha,
        received_at=datetime.now(UTC), source=record.source, codehost=record.codehost, clone_url=record.cloneUrl,
        head_repo_full_name=record.headRepository,
    )


class PreviewRoute(BaseModel):
    """A service of the preview routed besides `app` (a repository compose file's `x-preview`)."""

    model_config = ConfigDict(title="PreviewRoute", frozen=True)

    name: str = Field(description="The route's name: its path `/{projectSlug}/pr-{N}/{name}/`, or its host "
                                  "`{name}--{label}.{PREVIEW_DOMAIN}`")
    service: str = Field(description="The compose service it reaches")
    port: int = Field(description="The host port (127.0.0.1) nginx proxies to")
    healthCheckPath: str
    url: str


class PreviewLink(BaseModel):
    """A link of preview-config.yml as the last deploy resolved it (docs/routing.md, "Linked previews")."""

    model_config = ConfigDict(title="PreviewLink", frozen=True)

    name: str = Field(description="The link's `as`: the app gets PREVIEW_LINK_{name}_URL")
    repo: str = Field(description="The linked repository, as preview-config.yml names it")
    deploymentId: str | None = Field(description="The linked preview: the repository's pull request of the same "
                                                 "head branch, else its base preview; null: none runs")
    url: str | None


class DeploymentRecord(BaseModel):
    """One tracked preview, as stored and as returned by `GET /api/previews`."""

    # Frozen: the store shares records between cached snapshots; a change is a `model_copy(update=...)`.
    model_config = ConfigDict(title="DeploymentRecord", frozen=True)

    prNumber: int
    repoName: str
    repoOwner: str
    projectSlug: str
    deploymentId: str = Field(description="Format {projectSlug}-{prNumber} ({projectSlug}-base for the standing "
                                          "preview of a default branch, BASE_PREVIEWS). Key of the record")
    branch: str
    commitSha: str
    framework: str | None = Field(
        description="One of the loaded framework plugins (built in: nestjs, go, laravel, rust, python); "
        "null until preview-config.yml was read"
    )
    dbType: str | None = Field(
        description="One of the loaded database plugins (built in: postgres, mysql, mongodb); "
        "null until preview-config.yml was read"
    )
    appPort: int | None = Field(description="Port the app listens on inside the container; null until known")
    exposedAppPort: int
    exposedDbPort: int
    status: DeploymentStatus
    createdAt: datetime
    updatedAt: datetime
    url: str
    commentId: int | None = Field(
        default=None, description="Pull-request comment kept up to date; null until one was posted"
    )
    cloneUrl: str | None = Field(default=None, description="Where the head commit was cloned from")
    headRepository: str | None = Field(
        default=None, description="owner/name of the pull request's head repository (a fork's, for a fork); null "
        "when unknown (a preview recorded before the service kept it)")
    error: str | None = Field(default=None, description="Why the last deploy or update failed; null otherwise")
    codehostDeploymentId: int | None = Field(
        default=None, description="The code host's deployment for the current commit; null when not reported"
    )
    source: PreviewSource = Field(
        default="codehost", description="codehost: a pull request; local: `preview-orchestrator up` on the host"
    )
    codehost: str = Field(
        default=CODEHOST, description="The code host of the pull request (source codehost): github, gitea, or a "
        "code host plugin's name"
    )
    sleptAt: datetime | None = Field(
        default=None, description="When the preview went to sleep (status sleeping); null while it is awake"
    )
    wokeAt: datetime | None = Field(
        default=None, description="When the preview last woke from sleep; null if it never slept"
    )
    routes: list[PreviewRoute] = Field(
        default_factory=list, description="Services routed besides the app (x-preview in the repository's compose "
        "file), each with its own URL; empty for most previews")
    links: list[PreviewLink] = Field(
        default_factory=list, description="preview-config.yml's links as the last deploy resolved them (the "
        "other repositories' previews this one calls); empty for most previews")
    secretsScope: Literal["deployment", "repository"] = Field(
        default="deployment", description="What the preview's database password and derived secrets are keyed "
        "by: its repository and deployment id (previews deployed since 0.2), or the deployment id alone (older "
        "ones: their database volume keeps that password until the preview is closed)"
    )

    @property
    def repository(self) -> str:
        """The repository's identity (common/naming.py): host, owner and name."""
        return _repository(self.source, self.codehost, self.repoOwner, self.repoName)

    @property
    def subject(self) -> str:
        """This preview of this repository: what its tokens and wake key are signed for."""
        return preview_subject(self.repository, self.deploymentId)

    @property
    def is_base(self) -> bool:
        """The standing preview of the repository's default branch (BASE_PREVIEWS): never expired by the TTL."""
        return self.prNumber == BASE

    def belongs_to(self, event: PullRequestEvent) -> bool:
        """Whether `event` is of this preview's repository (names compare case-insensitively) and source."""
        return self.repository == event.repository


class DeploymentTaken(Exception):
    """A deployment id is another repository's: its preview's record, or an open event, is of `owner/name` (their
    names give the same slug: `acme/web-app` and `acme-web/app`)."""

    def __init__(self, owner: str, name: str, deployment_id: str) -> None:
        self.owner = owner
        self.name = name
        self.deployment_id = deployment_id
        self.message = (f"Deployment {deployment_id} belongs to the repository {owner}/{name}; another repository "
                        "whose name gives the same deployment id cannot use it")
        super().__init__(self.message)


def check_owner(record: DeploymentRecord | None, event: PullRequestEvent) -> None:
    """The one rule of a shared deployment id: a preview belongs to one repository, and an event of another never
    updates, resets or removes it (DeploymentTaken). Every way in applies it — the webhook, a replay, a local
    preview, the engine — and the inbox the same to the open events it holds."""
    if record is not None and not record.belongs_to(event):
        raise DeploymentTaken(record.repoOwner, record.repoName, event.deployment_id)


class PortAllocation(BaseModel):
    model_config = ConfigDict(title="PortAllocation", frozen=True)

    exposedAppPort: int
    exposedDbPort: int
    # the host ports of the services routed besides the app (x-preview): route name -> port, from the app's pool
    routedPorts: dict[str, int] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _spec_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The spec's shape (two ports) for a preview that routes nothing besides its app."""
        data: dict[str, Any] = handler(self)
        if not self.routedPorts:
            data.pop("routedPorts", None)
        return data

    def ports(self) -> set[int]:
        return {self.exposedAppPort, self.exposedDbPort, *self.routedPorts.values()}


class StoreFile(BaseModel):
    """The tracking store's JSON document."""

    deployments: dict[str, DeploymentRecord] = Field(default_factory=dict)
    portAllocations: dict[str, PortAllocation] = Field(default_factory=dict)
