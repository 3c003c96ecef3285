"""The built-in `compose` runtime: a preview is a docker compose project on this host's Docker engine.

Registered as a built-in plugin (rendering/plugin_host.py, DEFAULT_PLUGINS); it is how a third party's runtime looks:
`po_runtimes` names it, `po_runtime` builds it for the service's settings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import (
    OWNER_LABEL,
    Check,
    CommandFailed,
    DatabaseSeed,
    DataSeed,
    DeploymentLog,
    FlowControl,
    HostEnv,
    Runtime,
    RuntimeFailure,
    RuntimeSpec,
    Settings,
    WarmPool,
    hookimpl,
)
from orchestrator.runtime.compose_cli import Compose, Container, DockerResources
from orchestrator.runtime.compose_reset import reset_database
from orchestrator.runtime.compose_seeding import ComposeSeeding, Seeding
from orchestrator.runtime.data_seeds import DataSeeds
from orchestrator.runtime.database_seeds import DatabaseSeeds
from orchestrator.runtime.dependency_waits import LOOK_SECONDS, await_healthchecks
from orchestrator.runtime.failures import failure
from orchestrator.runtime.kept_stages import KeptStages
from orchestrator.runtime.seed_catalogue import warm_pools
from orchestrator.runtime.seed_layers import HOLDER_LABEL, release_holders
from orchestrator.runtime.seed_spares import SeedSpares
from orchestrator.runtime.written_compose import built_images, prebuilt_services, started_early

NAME = "compose"
WATCHED = ("app", "db")  # an extra service may be a one-shot job that exits on purpose


@hookimpl(trylast=True)
def po_runtimes() -> list[RuntimeSpec]:
    return [RuntimeSpec(name=NAME, description="docker compose on this host's Docker engine (one project per preview)")]


@hookimpl(trylast=True)
def po_runtime(name: str, settings: Settings) -> ComposeRuntime | None:
    if name != NAME:
        return None
    env = HostEnv.for_state_dir(settings.state_dir)
    docker = DockerResources(env)
    data = DataSeeds(env, settings.state_dir, docker, int(settings.seed_cache_gb * 2**30), settings.cleanup_ttl_days)
    return ComposeRuntime(settings.compose_timeout_seconds, env, DatabaseSeeds(env, settings.state_dir, docker),
                          settings.database_seeds, data,
                          SeedSpares(env, settings.state_dir, docker, data, settings.seed_spares))


# Repository seeds unused for CLEANUP_TTL_DAYS, or beyond SEED_CACHE_GB, are looked for this often.
SEED_EVICTION_SECONDS = 3600.0


class ComposeRuntime(KeptStages, Runtime):
    name = NAME
    restores_seeds = True  # a repository's `seed` (data_seeds.py)
    routes_services = True  # x-preview's services, published on 127.0.0.1 like the app

    def __init__(self, timeout: float, env: HostEnv, seeds: DatabaseSeeds | None = None, empty_seeds: bool = True,
                 data_seeds: DataSeeds | None = None, spares: SeedSpares | None = None) -> None:
        self.compose = Compose(timeout, env)
        self.docker = DockerResources(env)
        self.data_seeds = data_seeds
        self.seeding = ComposeSeeding(self.compose, self.docker, seeds, seeds if empty_seeds else None, data_seeds,
                                      spares)
        # Per deployment (one deploy of it at a time): seed_database -> start_dependencies (one thread) -> start, each
        # cleared by the next deploy and by remove, so nothing of a deploy that failed reaches the next one.
        self._lock = threading.Lock()
        self._seeding: dict[str, Seeding] = {}
        # its dependencies start from data that exists: the app starts alone once they pass, when they last did
        self._initialised: dict[str, float | None] = {}
        self._build_failed: set[str] = set()  # an early wait beside a build that failed gives up
        self._after_start: dict[str, Seeding] = {}  # a seed, spares, a holder to make once started

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        return self.compose.normalized(compose_file, deployment_id)

    def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        built = False  # a second build (flows/base_dependencies.py) may succeed where the first failed
        try:
            with failure("Docker build failed"):
                self.compose.build(deployment_id, compose_file, log, control)
            built = True
        finally:
            with self._lock:
                (self._build_failed.discard if built else self._build_failed.add)(deployment_id)

    def has_images(self, deployment_id: str, compose_file: Path) -> bool:
        """Every service the file builds has its image (`po-build/…`, named by the renderer) on the engine."""
        images = built_images(compose_file)
        return bool(images) and all(self.docker.has_image(image) for image in images)

    def image_command(self, deployment_id: str, compose_file: Path, service: str, image: str, log: DeploymentLog,
                      control: FlowControl) -> tuple[list[str] | None, list[str] | None]:
        with failure("The app image's entrypoint could not be read"):
            try:
                return self.docker.image_command(image)
            except CommandFailed:  # an `image:` the build did not make: compose pulls it
                self.compose.pull(deployment_id, compose_file, service, log, control)
                return self.docker.image_command(image)

    def seed_database(self, deployment_id: str, compose_file: Path, seed: DatabaseSeed, log: DeploymentLog,
                      control: FlowControl, data: DataSeed | None = None) -> None:
        """Before `start_dependencies`: a new deployment's database volume made from a seed (compose_seeding.py)."""
        with self._lock:  # nothing of an earlier deploy, should `plan` fail and `start_dependencies` not run
            self._initialised.pop(deployment_id, None)
            self._after_start.pop(deployment_id, None)
        seeding = self.seeding.plan(deployment_id, compose_file, seed, log, control, data)
        if seeding is not None:
            with self._lock:
                self._seeding[deployment_id] = seeding

    def collect_garbage(self) -> bool:
        """Repository seeds past CLEANUP_TTL_DAYS or SEED_CACHE_GB, and spares and empty seeds unused, removed."""
        evicted = bool(self.data_seeds.evict()) if self.data_seeds is not None else False
        self.seeding.sweep()
        return evicted

    @property
    def garbage_interval_seconds(self) -> float:
        return SEED_EVICTION_SECONDS if self.data_seeds is not None else 0.0

    def pools(self) -> list[WarmPool]:
        """The repositories' seeds and their free spare layers, from the catalogue's files (no docker call)."""
        return [] if self.data_seeds is None else warm_pools(self.data_seeds.state_dir)

    def checks(self) -> list[Check]:
        """doctor's lines of the base previews' dependencies and the repositories' seeds this runtime keeps."""
        return [self.kept_check(), *([] if self.data_seeds is None else [self.data_seeds.check()])]

    def start_dependencies(self, deployment_id: str, compose_file: Path, log: DeploymentLog,
                           control: FlowControl) -> None:
        """The database and extra services, while the app builds. A database that starts from data that exists — a
        copy of a seed, or its own volume on an update — is ready in a fraction of a second: its healthchecks are
        run here, at once and every READY_PAUSE seconds, beside the build (a build that fails ends the wait), so that
        `start` mostly finds them healthy and starts the app alone. Not for a database initialising itself: on a
        2-core host those probes take CPU from its first start and were measured slower (docs/benchmarks.md);
        `start` leaves it to compose and Docker's schedule of the healthcheck."""
        with self._lock:  # what seed_database found just before, in this thread; nothing of an earlier deploy
            seeding = self._seeding.pop(deployment_id, None) or Seeding()
            self._initialised.pop(deployment_id, None)
            self._build_failed.discard(deployment_id)
            self._after_start.pop(deployment_id, None)
            if seeding.unseeded is not None or seeding.refill is not None or seeding.held is not None:
                self._after_start[deployment_id] = seeding
        services = prebuilt_services(compose_file)
        copied, declared = self.seeding.start_from_copy(deployment_id, compose_file, services, seeding.copy, log,
                                                        control) if seeding.copy is not None else (False, None)
        if not copied and services:
            with failure("The database and extra services failed to start"):
                self.compose.up_services(deployment_id, compose_file, services, log, control)
        if not (copied or seeding.existing):
            return
        with self._lock:
            self._initialised[deployment_id] = None
        looked = time.monotonic()  # the oldest evidence of the wait: one may pass, then go while another is awaited
        with failure("Containers failed to start"):  # looked up when not declared: one may be left over
            if (dependencies := declared or started_early(self.docker.containers(deployment_id),
                                                          compose_file)) is not None and \
                    self._await(deployment_id, dependencies, log, control,
                                give_up=lambda: deployment_id in self._build_failed):
                with self._lock:
                    self._initialised[deployment_id] = looked

    def reset_database(self, deployment_id: str, compose_file: Path, log: DeploymentLog) -> list[str]:
        """`/preview reset-db`: the `db` service's volumes and the containers of `db` and `app` removed
        (compose_reset.py); the update the flow runs next creates them again."""
        return reset_database(self.docker, self.seeding.copies, deployment_id, compose_file, log)

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """When the dependencies start from data that exists: the app started alone once they pass — as they did
        beside the build less than LOOK_SECONDS ago, else looked at again (one may have gone during a long build;
        those Docker's healthcheck finds healthy need no probe) and awaited. Else `docker compose up`, whose app
        waits for Docker's schedule of the database's healthcheck (its first run 2 s after the start)."""
        with self._lock:
            initialised = deployment_id in self._initialised
            passed = self._initialised.pop(deployment_id, None)
            later = self._after_start.pop(deployment_id, None)
        with failure("Containers failed to start"):
            if passed is not None and time.monotonic() - passed < LOOK_SECONDS:  # as fresh as a look now would be
                dependencies: list[Container] | None = []
            else:
                dependencies = started_early(self.docker.containers(deployment_id), compose_file) \
                    if initialised else None
            if dependencies is not None:
                self._await(deployment_id, dependencies, log, control)
                control.check()
                self.compose.up_services(deployment_id, compose_file, ["app"], log, control, no_deps=True)
            else:
                self.compose.up(deployment_id, compose_file, log, control)
        if later is not None:
            self.seeding.after_start(later)

    def stop(self, deployment_id: str, log: DeploymentLog | None) -> None:
        with failure("Containers could not be stopped"):
            self.compose.stop(deployment_id, log)

    def wake(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        """A sleeping preview: the containers `stop` left, started as they were (no recreation, no build). The
        database and extra services first; once their own healthchecks pass — run at once and every
        READY_PAUSE seconds, where `docker compose start` would wait for Docker's schedule of them (the
        database's every 2 s), which a request waiting for the wake would feel — the app."""
        with failure("Containers failed to start"):
            containers = self.docker.containers(deployment_id)
            if not any(container.service == "app" for container in containers):
                raise RuntimeFailure("Containers failed to start", "the preview's app container is gone")
            dependencies = [c for c in containers if c.service != "app"]
            self.docker.start([c.ident for c in dependencies], log)
            control.check()
            self._await(deployment_id, dependencies, log, control)
            control.check()
            self.docker.start([c.ident for c in containers if c.service == "app"], log)

    def _await(self, deployment_id: str, containers: list[Container], log: DeploymentLog, control: FlowControl,
               give_up: Callable[[], bool] = lambda: False) -> bool:
        return await_healthchecks(self.docker, lambda services: self.problem(deployment_id, services), containers, log,
                           control, give_up)

    def remove(self, deployment_id: str, compose_file: Path | None) -> list[str]:
        with self._lock:
            for state in (self._seeding, self._after_start):
                state.pop(deployment_id, None)
            self._initialised.pop(deployment_id, None)
            self._build_failed.discard(deployment_id)
        try:  # the holders of its layered copies first: they hold volumes removed below (seed_layers.hold)
            release_holders(self.docker.command, f"{HOLDER_LABEL}={deployment_id}")
        except CommandFailed:
            pass
        try:
            self.compose.down(deployment_id, compose_file, None)
        except CommandFailed:
            pass  # what compose could not remove is removed by label below
        problems = self.docker.remove_labelled(deployment_id, None)
        self.seeding.sweep()  # a spare, or an old empty seed, its database was layered on
        try:
            left = {ident.split(":", 1)[0] for ident in self.owned(deployment_id)}
        except RuntimeFailure as exc:
            return [*problems, exc.message]
        return problems + [f"{kind}s still present" for kind in ("container", "volume", "network") if kind in left]

    def logs(self, deployment_id: str, compose_file: Path, service: str | None, tail: int) -> str:
        with failure("Container logs could not be read"):
            return self.compose.logs(deployment_id, compose_file, service, tail=tail)

    def problem(self, deployment_id: str, services: tuple[str, ...] = WATCHED, counts: bool = True) -> str | None:
        """Why one of `services` cannot come up (it exited, or restarts), or None. `counts`: a restart count says so
        too (the app's and database's containers are new on every start; a routed service's may have run for days)."""
        with failure("Containers could not be inspected"):
            states = self.docker.container_states(deployment_id)
        for service in services:
            state = states.get(service)
            if state is None:
                continue
            code = state.get("ExitCode", 0)
            if state.get("Status") == "restarting":  # a crash loop, between two runs
                return f"{service} is restarting (exit code {code})"
            if counts and (restarts := state.get("RestartCount", 0)) > 0:  # a crash loop, running again a moment
                return f"{service} is restarting (restarted {restarts} time{'s' if restarts > 1 else ''})"
            if state.get("Status") in ("exited", "dead"):
                if state.get("OOMKilled"):
                    return f"{service} was killed: out of memory (exit code {code})"
                return f"{service} exited with code {code}"
        return None

    def service_problem(self, deployment_id: str, service: str) -> str | None:
        return self.problem(deployment_id, (service,), counts=False)

    def owned(self, deployment_id: str | None = None) -> dict[str, str]:
        found: dict[str, str] = {}
        with failure("Docker resources could not be listed"):
            for kind in ("container", "volume", "network", "image"):
                found.update({f"{kind}:{ident}": owner
                              for ident, owner in self.docker.labelled(kind, deployment_id).items()})
        return found

    def app_url(self, deployment_id: str, app_port: int, path: str) -> str:
        return f"http://127.0.0.1:{app_port}{path}"

    def ports_in_use(self) -> set[int]:
        with failure("Published ports could not be listed"):
            return self.docker.published_host_ports()

    def remove_leftovers(self, owner_marker: str) -> None:
        with failure("Containers of the previous run could not be removed"):
            self.docker.remove_containers(f"{OWNER_LABEL}={owner_marker}")
