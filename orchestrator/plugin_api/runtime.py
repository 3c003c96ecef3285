"""Where a rendered preview is built and run: the base a runtime plugin subclasses.

The flows hand a runtime the compose file the renderer wrote (judged by the compose policy, with every
resource labelled with the deployment id) and ask it to build, start, stop and remove it. `compose` (this host's
Docker engine) is built in (orchestrator/runtime/compose.py), and so is `swarm` (orchestrator/runtime/swarm/),
written as a third party would; a plugin adds another one with the `po_runtimes` and `po_runtime` hooks, and the
operator picks it with the RUNTIME setting.

Subclass `Runtime`, set `name`, and implement the methods marked "Required" (they raise NotImplementedError
here). Every other method has a default that is a correct answer for a runtime without that ability: its previews
never sleep, its databases initialise themselves, `/preview reset-db` is refused, and so on; override what your
runtime can do. A runtime reads its own settings from the environment when `po_runtime` builds it (as the swarm's
SWARM_* settings are read by orchestrator/runtime/swarm/settings.py) and brings its own `doctor` lines
(`checks`).

A runtime raises RuntimeFailure for a step that failed (the flows turn it into the spec's failure message and
show `detail` in the pull-request comment); it never raises for "nothing to do".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.common.flow_control import FlowControl
from orchestrator.plugin_api.checks import Check
from orchestrator.plugin_api.types import DatabaseSeed, DataSeed


class RuntimeSpec(BaseModel):
    """A runtime a plugin provides (`po_runtimes`); `name` is a value of the RUNTIME setting."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    description: str = ""


class WarmPool(BaseModel):
    """Something a runtime keeps ahead of one repository's previews (its database seed, spare layers of it), as the
    dashboard lists it: kept for that repository only, within the runtime's bound."""

    model_config = ConfigDict(frozen=True)

    repository: str = Field(description="owner/name")
    kind: str = Field(description="What it is, in a few words: `database seed`, `spare layers`")
    detail: str = Field(default="", description="Where it came from (a seed's source)")
    count: int = Field(ge=0)
    size_bytes: int = Field(ge=0)
    used_at: float | None = Field(default=None, description="When a preview last used it (seconds since the epoch)")
    bound: str = Field(default="SEED_CACHE_GB", description="The setting that bounds it: SEED_CACHE_GB (the "
                                                            "dashboard sums these against it), BASE_PREVIEWS (one "
                                                            "each)")


class KeptImage(BaseModel):
    """A local image the runtime kept (`kept_image`): a base preview's installed dependencies."""

    model_config = ConfigDict(frozen=True)

    id: str
    labels: dict[str, str] = Field(default_factory=dict)
    size_bytes: int = Field(ge=0)


class RuntimeFailure(Exception):
    """A runtime step failed; `detail` is the output that explains it (the last lines of the tool's log)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


LOCAL_APP_HOST = "127.0.0.1"


class SeedFailed(RuntimeFailure):
    """A repository's seed could not be restored or copied: the deploy fails (its database never starts empty in
    its place); `detail` holds the database's own error lines."""


class Runtime:
    """One deployment is one project (`deployment_id`) with the services of its compose file; `app` is the
    preview's web app, `db` its database."""

    name: ClassVar[str] = ""  # the RuntimeSpec's name
    # An update stops the old app before the new one answers (the swarm's stop-first updates): its routes then hand
    # nginx's 502/504 to the service, which answers "being updated" instead of an error while the deploy runs.
    updates_leave_gap: ClassVar[bool] = False
    # `seed_database` restores a repository's seed (preview-config.yml `seed`, its `data` argument); previews that
    # declare a seed fail on a runtime without it.
    restores_seeds: ClassVar[bool] = False
    # Services routed besides the app (x-preview) are published on this host's loopback like the app (their ports
    # in the compose file, `app_url` and `app_address` of their port); previews that route one fail on a runtime
    # without it.
    routes_services: ClassVar[bool] = False

    # Required --------------------------------------------------------------------------------------------

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        """Required. The compose file as this runtime will run it: interpolated, normalised (`docker compose
        config`). Raise ConfigError (plugin_api.preview_config) when the runtime cannot read it."""
        raise NotImplementedError

    def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """Required. Build the images of the compose file."""
        raise NotImplementedError

    def image_command(self, deployment_id: str, compose_file: Path, service: str, image: str, log: DeploymentLog,
                      control: FlowControl) -> tuple[list[str] | None, list[str] | None]:
        """Required. The ENTRYPOINT and CMD of `service`'s image (built, or pulled when the build did not make it)."""
        raise NotImplementedError

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """Required. Create or update the deployment's containers and start them; return once they are started and
        nothing of before still runs: the health check that follows must be answered by what was deployed now."""
        raise NotImplementedError

    def stop(self, deployment_id: str, log: DeploymentLog | None) -> None:
        """Required. Stop the deployment's containers, keeping them and their data (a failed deploy, a preview that
        goes to sleep); its ports and networks stay the deployment's."""
        raise NotImplementedError

    def remove(self, deployment_id: str, compose_file: Path | None) -> list[str]:
        """Required. Remove everything of the deployment (containers, networks, volumes, images built for it); works
        without the compose file. Returns what could not be removed, in words; empty when nothing is left."""
        raise NotImplementedError

    def logs(self, deployment_id: str, compose_file: Path, service: str | None, tail: int) -> str:
        """Required. The last `tail` lines `service` printed (every service's, prefixed with its name, when None)."""
        raise NotImplementedError

    def problem(self, deployment_id: str) -> str | None:
        """Required. Why the deployment cannot come up although it started: its app or database container exited
        ("app exited with code 1") or is restarting ("app is restarting (exit code 1)"); None while they run.
        Asked about once a second while the health check waits."""
        raise NotImplementedError

    def owned(self, deployment_id: str | None = None) -> dict[str, str]:
        """Required. What carries the deployment label (`kind:id` -> deployment id): of one deployment, or of all."""
        raise NotImplementedError

    def app_url(self, deployment_id: str, app_port: int, path: str) -> str:
        """Required. Where the app answers `path` from this host (the health probe and the nginx route use it)."""
        raise NotImplementedError

    def ports_in_use(self) -> set[int]:
        """Required. Host ports other programs hold, never handed to a new preview."""
        raise NotImplementedError

    # Optional: the defaults are right for a runtime without the ability ----------------------------------

    def start_dependencies(self, deployment_id: str, compose_file: Path, log: DeploymentLog,
                           control: FlowControl) -> None:
        """Start what the app waits for and needs no build (database, extra services), while `build` runs in
        another thread. The default does nothing, a correct answer: `start` starts everything."""

    def remove_leftovers(self, owner_marker: str) -> None:
        """Start-up: remove what an earlier run of this service (`owner_marker`) left running for itself
        (build-command containers). The default: nothing is left."""

    def app_address(self, deployment_id: str, app_port: int) -> tuple[str, int]:
        """Where nginx must proxy the preview's app. The default: this host's loopback and the preview's port (the
        app answers on this host, as `compose`'s does); a swarm node's address for the swarm."""
        return LOCAL_APP_HOST, app_port

    def app_address_before_start(self, app_port: int) -> tuple[str, int] | None:
        """`app_address` when it is known before the preview starts (the route is then loaded while the app
        builds); None when only the started preview tells (a swarm node's address). The default: the loopback for
        a runtime that keeps the default `app_address`, None for one with its own."""
        return None if _overrides(self, "app_address") else (LOCAL_APP_HOST, app_port)

    def lost_previews(self, deployment_ids: list[str]) -> dict[str, str]:
        """Running previews this runtime knows to be gone for good (deployment id -> why, one sentence: their
        swarm node left); the service marks them failed. The default: it cannot tell."""
        return {}

    def collect_garbage(self) -> bool:
        """Free the space of what closed previews left in the runtime's storage (the swarm's registry); run every
        `garbage_interval_seconds`. True when something was collected or tried."""
        return False

    @property
    def garbage_interval_seconds(self) -> float:
        """How often the service calls `collect_garbage`; 0 (the default): never."""
        return 0.0

    def secrets(self) -> list[str]:
        """The secret values this runtime holds (its own settings' passwords): masked in deployment logs. The
        default: none."""
        return []

    def pools(self) -> list[WarmPool]:
        """What this runtime keeps warm ahead of previews, per repository (the compose runtime: repositories'
        database seeds and their spare layers): listed on the dashboard. Reads only what is cheap to read (a page
        load asks). The default: nothing."""
        return []

    def checks(self) -> list[Check]:
        """The runtime's own lines for `doctor` and the start-up checks (a failed `hard` one stops the service):
        what only it knows, such as a swarm's nodes and registry. The default: none."""
        return []

    def wake(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """Start again the containers `stop` left (a sleeping preview, PREVIEW_IDLE_MINUTES), their data kept;
        return once they are started (the service then waits for the health path). RuntimeFailure when they cannot
        start. Previews of a runtime that does not override it never sleep (`can_sleep`)."""
        raise RuntimeFailure(f"The {self.name} runtime cannot wake a preview")

    @property
    def can_sleep(self) -> bool:
        """Whether previews of this runtime may sleep: it overrides `wake`."""
        return _overrides(self, "wake")

    def seed_database(self, deployment_id: str, compose_file: Path, seed: DatabaseSeed, log: DeploymentLog,
                      control: FlowControl, data: DataSeed | None = None) -> None:
        """Called before `start_dependencies` of a compose file generated from the plugins whose database has a
        DatabaseSeed: create a new deployment's database volume from the seed, if the runtime can. Without `data`,
        never raise for a seed it could not use: the database then initialises itself, as without one. With `data`
        (the repository's own seed; only when `restores_seeds`), the volume holds that data or SeedFailed says why
        not; an existing volume made from other data (the seed changed) is replaced. The default: every database
        initialises itself, and a repository's seed is refused."""
        if data is not None:
            raise SeedFailed(f"The {self.name} runtime cannot restore a database seed")

    def service_problem(self, deployment_id: str, service: str) -> str | None:
        """Why one more service of the deployment (a routed one: `routes_services`) cannot come up, as `problem`
        says it of the app and the database; None while it runs. None here: its health check then waits until it
        answers or times out."""
        return None

    def has_images(self, deployment_id: str, compose_file: Path) -> bool:
        """Whether every image the compose file builds is still there, as its last build left it: a restart at the
        same commit (a linked preview moved, `/preview reset-db`) then starts them without building. False here:
        a runtime that cannot tell builds again, which is always correct."""
        return False

    def keep_stage(self, deployment_id: str, compose_file: Path, service: str, stage: str, image: str,
                   log: DeploymentLog, control: FlowControl) -> None:
        """After `build`: tag the stage `stage` of `service`'s build as `image` on the engine the next builds run
        on (a base preview's installed dependencies, RenderContext.base_dependencies). Nothing here: a runtime
        that does not keep one builds every pull request's dependencies from nothing, which is always correct."""

    def kept_image(self, image: str) -> KeptImage | None:
        """The local image `image` (its id, labels, size); None when it is absent (and here, where nothing is
        kept); RuntimeFailure when the engine cannot say, which callers never take for "absent"."""
        return None

    def reset_database(self, deployment_id: str, compose_file: Path, log: DeploymentLog) -> list[str]:
        """For `/preview reset-db`: remove the `db` service's named volumes and the containers of `db` and `app`,
        so that the update started next makes the database as a new preview's (from its seed when there is one) and
        starts the app against it; returns the volumes removed. RuntimeFailure when the preview has no `db` or its
        data stays. Refused on a runtime that does not override it (`can_reset_database`)."""
        raise RuntimeFailure(f"The {self.name} runtime cannot reset a preview's database")

    @property
    def can_reset_database(self) -> bool:
        """Whether `/preview reset-db` can be run on previews of this runtime: it overrides `reset_database`."""
        return _overrides(self, "reset_database")


REQUIRED = ("read", "build", "image_command", "start", "stop", "remove", "logs", "problem", "owned", "app_url",
            "ports_in_use")


def unimplemented(runtime: Runtime) -> list[str]:
    """The required methods `runtime` does not implement: the service refuses it at start-up, not at a deploy."""
    return [method for method in REQUIRED if not _overrides(runtime, method)]


def _overrides(runtime: Runtime, method: str) -> bool:
    return getattr(type(runtime), method) is not getattr(Runtime, method)
