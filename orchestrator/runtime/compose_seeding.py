"""The compose runtime's database seeds, deploy by deploy: before `start_dependencies`, a new preview's database volume
is created and a copy of a seed starts filling it while compose creates the containers, which start once it is
done. The seeds themselves (made once, copied, made a preview's own) are database_seeds.py's (an image's empty
data) and data_seeds.py's (a repository's restored dump).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import (
    CommandFailed,
    DatabaseSeed,
    DataSeed,
    DeploymentLog,
    FlowAborted,
    FlowControl,
    RuntimeFailure,
)
from orchestrator.plugin_api.runtime import SeedFailed
from orchestrator.runtime.compose_cli import Compose, Container, DockerResources
from orchestrator.runtime.data_seeds import FROM_SEED_LABEL, DataSeeds
from orchestrator.runtime.database_seeds import DatabaseSeeds, copy_container, volume_name
from orchestrator.runtime.failures import failure
from orchestrator.runtime.seed_layers import (
    COMPOSE_PROJECT_LABEL,
    COMPOSE_VOLUME_LABEL,
    HELD_LABEL,
    hold,
    release_holders,
)
from orchestrator.runtime.seed_spares import SeedSpares
from orchestrator.runtime.written_compose import declared_containers, prebuilt_services, seed_volume

STARTING = "The database and extra services failed to start"


@dataclass(frozen=True)
class SeedCopy:
    volume: str
    key: str
    began: float
    filling: Future[bool]  # a repository's seed's copy raises SeedFailed rather than answer False


@dataclass(frozen=True)
class Seeding:
    """What `plan` found for the deploy of a deployment."""

    existing: bool = False  # its volume exists: an update
    copy: SeedCopy | None = None  # a copy of a seed is filling its new volume
    unseeded: tuple[str, str, str, DatabaseSeed] | None = None  # image, its id, key: no seed yet
    refill: tuple[str, str, DatabaseSeed] | None = None  # a layered data seed's key, image id: spares to make
    held: tuple[str, str, str, str] | None = None  # a layered copy, its seed, image id, deployment: its holder


class ComposeSeeding:
    """`copies`: the seeds' copies, empty or a repository's (None: no seeds at all); `empty`: the empty seeds of
    DATABASE_SEEDS (None when off); `data`: the repositories' seeds."""

    def __init__(self, compose: Compose, docker: DockerResources, copies: DatabaseSeeds | None,
                 empty: DatabaseSeeds | None, data: DataSeeds | None, spares: SeedSpares | None = None) -> None:
        self.compose = compose
        self.docker = docker
        self.copies = copies
        self.empty = empty
        self.data = data
        self.spares = spares
        self._copier = ThreadPoolExecutor(4, thread_name_prefix="seed-copy")
        self._layering = True  # empty seeds' copies are overlays until the engine cannot mount one

    def plan(self, deployment_id: str, compose_file: Path, seed: DatabaseSeed, log: DeploymentLog,
             control: FlowControl, data: DataSeed | None = None) -> Seeding | None:
        """A new deployment's database volume created and a copy of the seed of its image, when there is one,
        filling it; a volume that exists (an update) is never touched, unless it is a copy a crash interrupted.
        With `data` (the repository's seed), the seed is that data (restored first if needed), and an existing
        volume made from other data is replaced; SeedFailed when it cannot be, whatever went wrong."""
        if data is not None:
            return self._from_data(deployment_id, compose_file, seed, data, log, control)
        if self.empty is None:
            return None
        found = seed_volume(compose_file, seed)
        if found is None:
            return None
        volume, image = found
        name = volume_name(deployment_id, seed.volume, volume)
        try:
            exists = self.docker.volume_exists(name)
        except CommandFailed as exc:
            log.note(f"database seed not used: {name} could not be looked at ({exc})")
            return None
        if exists and not self.empty.interrupted(name):  # an update: the database starts from its own data
            return Seeding(existing=True)
        if exists:  # half a copy, never a preview's data: removed with the containers holding it, then a new copy
            log.note(f"{name} holds a copy of a seed that was interrupted; it is made again")
            self.discard(deployment_id, compose_file, name, prebuilt_services(compose_file), log)
        keyed = self.empty.key(image, seed)
        if keyed is None:  # not pulled yet: compose pulls it, a later preview makes the seed
            return None
        key, image_id = keyed
        labels = {**{str(k): str(v) for k, v in (volume.get("labels") or {}).items()},
                  COMPOSE_PROJECT_LABEL: deployment_id, COMPOSE_VOLUME_LABEL: seed.volume}
        if self.empty.ready(key):
            empty = self.empty
            layered = seed.layered and self._layering and \
                empty.create_layer(name, labels, empty.volume(key), log)
            if layered and not empty.ready(key):  # being removed meanwhile: its removal did not see this copy
                layered = False
                if not empty.discard_volume(name):
                    raise RuntimeFailure(STARTING, f"{name} is layered on a seed being removed and stays")
            if layered or empty.create_volume(name, labels, key, log):
                return Seeding(copy=SeedCopy(name, key, time.monotonic(), self._copier.submit(
                    self._copy_empty, name, deployment_id, image_id, key, seed, labels, layered, log, control)),
                    held=(name, empty.volume(key), image_id, deployment_id) if layered else None)
        if not self.empty.ready(key):
            return Seeding(unseeded=(image, image_id, key, seed))
        return None

    def _copy_empty(self, name: str, deployment_id: str, image_id: str, key: str, seed: DatabaseSeed,
                    labels: dict[str, str], layered: bool, log: DeploymentLog, control: FlowControl) -> bool:
        """Fill `name` from the empty seed `key`: an overlay on it when `layered` (the command writes a few catalog
        pages, where a copy of the files took 0.7 s for PostgreSQL's 46 MB: docs/benchmarks.md). A layered copy
        that failed with the seed still good (docker's failure, as an overlay it could not mount, not the
        command's) is copied instead, and this service copies from then on."""
        assert self.empty is not None
        empty = self.empty
        if empty.copy(name, deployment_id, image_id, key, seed, log, control, layered=layered):
            return True
        if not layered or not empty.ready(key):
            return False
        self._layering = False
        log.note(f"layered copy of seed {key} failed: copied instead, from now on")
        return empty.discard_volume(name) and empty.create_volume(name, labels, key, log) and \
            empty.copy(name, deployment_id, image_id, key, seed, log, control)

    def after_start(self, seeding: Seeding) -> None:
        """Once the preview started, in the background: the empty seed it found missing (`plan`'s `unseeded`), and
        spares of the data seed it was layered on (seed_spares.py)."""
        if self.empty is not None and seeding.unseeded is not None:
            self.empty.make_in_background(*seeding.unseeded)
        if self.spares is not None and seeding.refill is not None:
            self.spares.refill(*seeding.refill)
        if seeding.held is not None:
            self._copier.submit(hold, self.docker.command, *seeding.held)

    def sweep(self) -> None:
        """Spares no preview has any more (seed_spares.py), and empty seeds no longer used that no preview is
        layered on (database_seeds.py): after a removal, and with the eviction."""
        try:  # a holder whose copy is gone (its preview removed while the service was down)
            release_holders(self.docker.command, HELD_LABEL)
        except CommandFailed:
            pass
        if self.spares is not None:
            self.spares.sweep()
        if self.copies is not None:
            self.copies.sweep()

    def start_from_copy(self, deployment_id: str, compose_file: Path, services: list[str], copy: SeedCopy,
                        log: DeploymentLog, control: FlowControl) -> tuple[bool, list[Container] | None]:
        """Compose creates the containers while the copy runs; they start once it is done. Returns whether the
        copy was made (False: the containers holding the volume and the volume are removed, the usual start
        follows) and the containers started, as the compose file declares them (None: not all are declared)."""
        copied = False
        try:
            with failure(STARTING):
                self.compose.up_services(deployment_id, compose_file, services, log, control, start=False)
        finally:
            try:
                copied = copy.filling.result()  # in every case: nothing may start from a volume half-copied
            finally:
                if not copied:  # failed, or aborted: its container is gone, so the volume can go
                    self.discard(deployment_id, compose_file, copy.volume, services, log)
        if not copied:
            return False, None
        log.note(f"database volume copied from seed {copy.key} ({time.monotonic() - copy.began:.2f}s)")
        # By the names the compose file gives them (a new project: nothing else is there), sparing a listing
        declared = declared_containers(compose_file, services)
        with failure(STARTING):
            self.docker.start([c.ident for c in declared or self.docker.containers(deployment_id)
                               if c.service in services], log)
        return True, declared

    def discard(self, deployment_id: str, compose_file: Path, volume: str, services: list[str],
                log: DeploymentLog) -> None:
        """Remove a volume of an unfinished copy and the containers of `services` that hold it. RuntimeFailure
        when it stays: starting the database from half a copy is worse than a failed deploy."""
        with failure(STARTING):
            held = [c.ident for c in self.docker.containers(deployment_id)  # and a copy's container a crash left
                    if c.service in services or c.service.lstrip("/") == copy_container(deployment_id)]
            self.docker.remove(held, log)
        if self.copies is not None and not self.copies.discard_volume(volume):
            raise RuntimeFailure(STARTING, f"{volume} holds part of a database seed's copy and could not be removed")

    # A repository's seed ---------------------------------------------------------------------------------

    def _from_data(self, deployment_id: str, compose_file: Path, seed: DatabaseSeed, data: DataSeed,
                   log: DeploymentLog, control: FlowControl) -> Seeding | None:
        """The repository's seed restored (once: data_seeds.py), and a copy of it filling the database's volume
        while compose creates the containers; SeedFailed when it cannot be, whatever went wrong (never an empty
        database instead, nor an update that keeps data made from other content)."""
        try:
            return self._restore_and_copy(deployment_id, compose_file, seed, data, log, control)
        except (SeedFailed, FlowAborted):
            raise
        except RuntimeFailure as exc:
            raise SeedFailed("The database seed could not be copied", exc.detail or exc.message) from None
        except Exception as exc:  # noqa: BLE001 - any other failure: the deploy fails, it does not go on empty
            raise SeedFailed("The database seed could not be restored", f"{type(exc).__name__}: {exc}") from None

    def _restore_and_copy(self, deployment_id: str, compose_file: Path, seed: DatabaseSeed, data: DataSeed,
                          log: DeploymentLog, control: FlowControl) -> Seeding | None:
        if self.data is None or self.copies is None:
            raise SeedFailed("The compose runtime cannot restore a database seed")
        found = seed_volume(compose_file, seed)
        if found is None:
            raise SeedFailed("The database cannot be seeded",
                             f"the db service has no volume {seed.volume} of its own to hold the seed")
        volume, image = found
        name = volume_name(deployment_id, seed.volume, volume)
        image_id = self._image_id(self.copies, deployment_id, compose_file, image, log, control)
        key, content = self.data.prepare(image, image_id, seed, data, log, control)
        try:  # reserved by prepare: released once the copy is done, or here when none is made
            seeding = self._copy_data(deployment_id, compose_file, seed, data, name, volume, image_id, key,
                                      content, log, control)
        except BaseException:
            self.data.release(key)
            raise
        if seeding.copy is None:
            self.data.release(key)
        return seeding

    def _copy_data(self, deployment_id: str, compose_file: Path, seed: DatabaseSeed, data: DataSeed, name: str,
                   volume: dict[str, Any], image_id: str, key: str, content: str, log: DeploymentLog,
                   control: FlowControl) -> Seeding:
        """A copy of the data seed `key` filling the volume `name` while compose creates the containers, which
        releases the seed once done; or the volume as it is when it already holds this content (an update keeps
        its data)."""
        assert self.copies is not None and self.data is not None
        copies, seeds = self.copies, self.data
        with failure("The database seed could not be copied", SeedFailed):
            exists = self.docker.volume_exists(name)
            if exists and not copies.interrupted(name):
                if copies.label(name, FROM_SEED_LABEL) == content:  # an update: the database keeps its own data
                    return Seeding(existing=True)
                log.note(f"{name} was not made from seed {key} ({data.source} or its commands changed): the "
                         "database starts from the seed")
        if exists:
            self.discard(deployment_id, compose_file, name, prebuilt_services(compose_file), log)
        labels = {**{str(k): str(v) for k, v in (volume.get("labels") or {}).items()},
                  COMPOSE_PROJECT_LABEL: deployment_id, COMPOSE_VOLUME_LABEL: seed.volume, FROM_SEED_LABEL: content}
        source = seeds.volume(key)
        spare = self.spares.take(key) if self.spares is not None and seed.layered else None
        try:
            layered = seed.layered and copies.create_layer(name, labels, source, log, spare=spare)
        finally:
            if spare is not None and self.spares is not None:
                self.spares.settle(spare)  # named by the overlay volume now; or a failure's, which `sweep` removes
        if layered and spare is not None:
            log.note(f"database layered on spare {spare}: the seed's files are in it already")
        if not layered and not copies.create_volume(name, labels, key, log, source=source):
            raise SeedFailed("The database seed could not be copied",
                             f"{name} could not be created, or seed {key} is gone from the engine")

        def fill() -> bool:
            try:
                try:
                    return copies.copy(name, deployment_id, image_id, key, seed, log, control, source=source,
                                       layered=layered)
                except SeedFailed as exc:
                    if not layered:
                        raise
                    # An engine that cannot mount the overlay (user namespaces, a file system overlayfs refuses)
                    log.note(f"layered copy of seed {key} failed ({exc.detail or exc.message}): copied instead")
                    if not (copies.discard_volume(name) and copies.create_volume(name, labels, key, log,
                                                                                 source=source)):
                        raise
                    return copies.copy(name, deployment_id, image_id, key, seed, log, control, source=source)
            finally:
                seeds.release(key)

        refill = (key, image_id, seed) if seed.layered else None
        return Seeding(copy=SeedCopy(name, key, time.monotonic(), self._copier.submit(fill)), refill=refill,
                       held=(name, source, image_id, deployment_id) if layered else None)

    def _image_id(self, copies: DatabaseSeeds, deployment_id: str, compose_file: Path, image: str,
                  log: DeploymentLog, control: FlowControl) -> str:
        """The id of the database's image, pulled first when the engine does not have it."""
        with failure("The database seed could not be restored", SeedFailed):
            if (found := copies.image_id(image)) is not None:
                return found
            self.compose.pull(deployment_id, compose_file, "db", log, control)
            if (found := copies.image_id(image)) is None:
                raise SeedFailed("The database seed could not be restored", f"{image} is not on the engine")
            return found
