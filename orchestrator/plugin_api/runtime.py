"""Where a rendered preview is built and run: the interface a runtime plugin implements.

The flows hand a runtime the compose file the renderer wrote (judged by the compose policy, with every
resource labelled with the deployment id) and ask it to build, start, stop and remove it. `compose` (this host's
Docker engine) is built in (orchestrator/runtime/compose.py); a plugin adds another one with the `po_runtimes`
and `po_runtime` hooks, and the operator picks it with the RUNTIME setting.

A runtime raises RuntimeFailure for a step that failed (the flows turn it into the spec's failure message and
show `detail` in the pull-request comment); it never raises for "nothing to do".

Optional: a runtime whose app does not answer on this host (a swarm node) also has
`app_address(deployment_id, app_port) -> (host, port)`, where nginx on this host must proxy the preview; a runtime
without it is proxied at 127.0.0.1 and the preview's port, as `compose` is (see `app_address` below). Also
optional: `lost_previews(deployment_ids) -> {deployment_id: why}`, the running previews it knows to be gone for
good (their swarm node left); the service marks them failed (see `lost_previews` below). And
`wake(deployment_id, compose_file, log, control)`, which starts again the containers `stop` left (a sleeping
preview, PREVIEW_IDLE_MINUTES); previews of a runtime without it never sleep (see `can_sleep` below). And
`seed_database(deployment_id, compose_file, seed, log, control)`, called before `start_dependencies` of a compose
file generated from the plugins whose database has a DatabaseSeed: it may create the database's volume from a
seed (see `seed_database` below); without it every database initialises itself. A runtime whose `seed_database`
also takes `data` (a repository's `seed`, plugin_api.DataSeed) says so with `restores_seeds = True`; previews
that declare a seed fail on any other (see `restores_seeds` below). And `collect_garbage()`, run
every SWARM_REGISTRY_GC_INTERVAL_SECONDS, which frees what closed previews left in the runtime's storage (see
`collect_garbage` below). And `reset_database(deployment_id, compose_file, log)`, for `/preview reset-db`: the
`db` service's data and its and the app's containers removed, so that the next start makes the database as a new
preview's (see `reset_database` below). And the attribute `updates_leave_gap = True` for a runtime whose update
stops the old app before the new one answers (see `updates_leave_gap` below). And `checks() -> list[Check]`, the
runtime's own lines for `doctor` and the start-up checks (a failed `hard` one stops the service; see
`runtime_checks` below).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

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


class RuntimeFailure(Exception):
    """A runtime step failed; `detail` is the output that explains it (the last lines of the tool's log)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


@runtime_checkable
class Runtime(Protocol):
    """One deployment is one project (`deployment_id`) with the services of its compose file; `app` is the
    preview's web app, `db` its database."""

    name: str

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        """The compose file as this runtime will run it: interpolated, normalised (`docker compose config`).
        Raise ConfigError (plugin_api.preview_config) when the runtime cannot read it."""

    def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """Build the images of the compose file."""

    def image_command(self, deployment_id: str, compose_file: Path, service: str, image: str, log: DeploymentLog,
                      control: FlowControl) -> tuple[list[str] | None, list[str] | None]:
        """The ENTRYPOINT and CMD of `service`'s image (built, or pulled when the build did not make it)."""

    def start_dependencies(self, deployment_id: str, compose_file: Path, log: DeploymentLog,
                           control: FlowControl) -> None:
        """Start what the app waits for and needs no build (database, extra services), while `build` runs in
        another thread; doing nothing is a correct answer (`start` starts everything)."""

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """Create or update the deployment's containers and start them; return once they are started and
        nothing of before still runs: the health check that follows must be answered by what was deployed now."""

    def stop(self, deployment_id: str, log: DeploymentLog | None) -> None:
        """Stop the deployment's containers, keeping them and their data (a failed deploy, a preview that goes
        to sleep); its ports and networks stay the deployment's."""

    def remove(self, deployment_id: str, compose_file: Path | None) -> list[str]:
        """Remove everything of the deployment (containers, networks, volumes, images built for it); works
        without the compose file. Returns what could not be removed, in words; empty when nothing is left."""

    def logs(self, deployment_id: str, compose_file: Path, service: str | None, tail: int) -> str:
        """The last `tail` lines `service` printed (every service's, prefixed with its name, when None)."""

    def problem(self, deployment_id: str) -> str | None:
        """Why the deployment cannot come up although it started: its app or database container exited
        ("app exited with code 1") or is restarting ("app is restarting (exit code 1)"); None while they run.
        Asked about once a second while the health check waits."""

    def owned(self, deployment_id: str | None = None) -> dict[str, str]:
        """What carries the deployment label (`kind:id` -> deployment id): of one deployment, or of all."""

    def app_url(self, deployment_id: str, app_port: int, path: str) -> str:
        """Where the app answers `path` from this host (the health probe and the nginx route use it)."""

    def ports_in_use(self) -> set[int]:
        """Host ports other programs hold, never handed to a new preview."""

    def remove_leftovers(self, owner_marker: str) -> None:
        """Start-up: remove what an earlier run of this service (`owner_marker`) left running for itself
        (build-command containers)."""


LOCAL_APP_HOST = "127.0.0.1"


def app_address(runtime: Runtime, deployment_id: str, app_port: int) -> tuple[str, int]:
    """Where nginx must proxy the preview's app: the runtime's own `app_address` when it has one, else this
    host's loopback and the preview's port. Kept out of the Runtime protocol so that runtimes written before it
    still satisfy the protocol unchanged."""
    if (known := app_address_before_start(runtime, app_port)) is not None:
        return known
    host, port = runtime.app_address(deployment_id, app_port)  # type: ignore[attr-defined]
    return str(host), int(port)


def app_address_before_start(runtime: Runtime, app_port: int) -> tuple[str, int] | None:
    """`app_address` when it is known before the preview starts (a runtime without its own: this host's loopback
    and the preview's port); None when only the started preview tells (a swarm node's address)."""
    if getattr(runtime, "app_address", None) is not None:
        return None
    return LOCAL_APP_HOST, app_port


def lost_previews(runtime: Runtime, deployment_ids: list[str]) -> dict[str, str]:
    """Running previews the runtime knows to be gone (deployment id -> why, one sentence); none when the
    runtime cannot tell (it has no `lost_previews`)."""
    method = getattr(runtime, "lost_previews", None)
    if method is None or not deployment_ids:
        return {}
    return {str(key): str(value) for key, value in method(deployment_ids).items()}


def collect_garbage(runtime: Runtime) -> bool:
    """Let the runtime free the space of what closed previews left in its storage (the swarm's registry); False
    when it has nothing to collect (no `collect_garbage`, or it is not configured to)."""
    method = getattr(runtime, "collect_garbage", None)
    return method is not None and method() is not None


def runtime_checks(runtime: Runtime) -> list[Check]:
    """The runtime's own lines for `doctor` and the start-up checks (its optional `checks()`): what only it
    knows, such as a swarm's nodes and registry; none without it."""
    method = getattr(runtime, "checks", None)
    return list(method()) if method is not None else []


def updates_leave_gap(runtime: Runtime) -> bool:
    """Whether an update stops the old app before the new one answers (the runtime's `updates_leave_gap = True`,
    as the swarm's stop-first updates do): its routes then hand nginx's 502/504 to the service, which answers
    "being updated" instead of an error while the deploy runs."""
    return bool(getattr(runtime, "updates_leave_gap", False))


def can_sleep(runtime: Runtime) -> bool:
    """Whether previews of `runtime` may sleep: it has the optional `wake` (start again what `stop` stopped)."""
    return callable(getattr(runtime, "wake", None))


def wake(runtime: Runtime, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
    """Start again the containers of a sleeping preview, as `stop` left them (their data kept); return once they
    are started (the service then waits for the health path). RuntimeFailure when they cannot start; a runtime
    without `wake` is one whose previews never sleep, so calling this for it is a mistake."""
    method = getattr(runtime, "wake", None)
    if method is None:
        raise RuntimeFailure(f"The {runtime.name} runtime cannot wake a preview")
    method(deployment_id, compose_file, log, control)


class SeedFailed(RuntimeFailure):
    """A repository's seed could not be restored or copied: the deploy fails (its database never starts empty in
    its place); `detail` holds the database's own error lines."""


def restores_seeds(runtime: Runtime) -> bool:
    """Whether `runtime` restores a repository's seed (preview-config.yml `seed`) into its previews' databases."""
    return getattr(runtime, "restores_seeds", False) is True


def seed_database(runtime: Runtime, deployment_id: str, compose_file: Path, seed: DatabaseSeed, log: DeploymentLog,
                  control: FlowControl, data: DataSeed | None = None) -> None:
    """Let the runtime create a new deployment's database volume from a seed (plugin_api.DatabaseSeed), if it
    can. Without `data`, never raises for a seed it could not use: the database then initialises itself, as without
    one. With `data` (the repository's own seed), the volume holds that data or SeedFailed says why not; an
    existing volume made from other data (the seed changed) is replaced."""
    method = getattr(runtime, "seed_database", None)
    if data is not None:
        if method is None or not restores_seeds(runtime):
            raise SeedFailed(f"The {runtime.name} runtime cannot restore a database seed")
        method(deployment_id, compose_file, seed, log, control, data=data)
    elif method is not None:
        method(deployment_id, compose_file, seed, log, control)


def can_reset_database(runtime: Runtime) -> bool:
    """Whether `/preview reset-db` can be run on previews of `runtime` (it has the optional `reset_database`)."""
    return callable(getattr(runtime, "reset_database", None))


def reset_database(runtime: Runtime, deployment_id: str, compose_file: Path, log: DeploymentLog) -> list[str]:
    """Remove the `db` service's named volumes and the containers of `db` and `app`, so that the update started
    next makes the database as a new preview's (from its seed when there is one) and starts the app against it;
    returns the volumes removed. RuntimeFailure when the preview has no `db` or its data stays."""
    method = getattr(runtime, "reset_database", None)
    if method is None:
        raise RuntimeFailure(f"The {runtime.name} runtime cannot reset a preview's database")
    return list(method(deployment_id, compose_file, log))
