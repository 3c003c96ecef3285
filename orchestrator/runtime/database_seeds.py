"""Database seeds (plugin_api.DatabaseSeed) on this host's Docker engine: a data directory per database image,
initialised once in a container of its own, that a new preview's volume starts as a copy of (or an overlay on:
seed_layers.py) — so the preview's database skips its first-start initialisation (docs/benchmarks.md).

A seed is made of nothing a pull request wrote: the image as the operator configured it and the plugin's
`environment`. The copy runs the plugin's `command` with no network. A seed is ready once its marker
`<state dir>/database-seeds/<key>` exists; the key covers the image's id and the recipe, so a new image or recipe
makes a new seed, and the old one is removed once no preview is layered on it. Seeds are this service's (their
names and labels carry its HostEnv marker): two services on one engine never touch each other's.

A copy is marked in `<state dir>/database-seeds/copying/<volume>` from before its volume exists until it is whole,
so a volume a crash left half-copied is never taken for a preview's data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import DEPLOYMENT_LABEL, OWNER_LABEL, CommandFailed, DeploymentLog, FlowControl, HostEnv
from orchestrator.plugin_api.runtime import SeedFailed
from orchestrator.plugin_api.types import SEED_MOUNT, DatabaseSeed
from orchestrator.runtime.compose_cli import DockerResources
from orchestrator.runtime.seed_containers import BOUNDS, await_ready, error_lines, label_args
from orchestrator.runtime.seed_layers import (
    create_layer,
    holder_name,
    layer_of,
    layer_volume,
    pinned,
    quietly,
    spare_prefix,
    volume_label,
)

log = logging.getLogger("orchestrator.runtime.seeds")

SEED_LABEL = "dev.preview-orchestrator.seed"  # on a seed's volume and container: the image it was made from
COPY_LABEL = "dev.preview-orchestrator.seed-copy"  # on a volume created for a copy: a nonce proving who created it
MAKE_TIMEOUT = 300.0
COPY_TIMEOUT = 120.0


class DatabaseSeeds:
    def __init__(self, env: HostEnv, state_dir: Path, docker: DockerResources) -> None:
        self._env = env
        self._engine = docker
        self._markers = state_dir / "database-seeds"
        self._copying = self._markers / "copying"
        self._lock = threading.Lock()
        self._making: set[str] = set()
        self._broken: set[str] = set()

    def _docker(self, argv: list[str], timeout: float = 60, log_to: DeploymentLog | None = None,
                control: FlowControl | None = None, stdin: bytes | None = None) -> str:
        return self._engine.command(argv, log_to, timeout, control, stdin)

    def image_id(self, image: str) -> str | None:  # None when it is not on the engine (yet)
        try:
            return self._docker(["image", "inspect", "--format", "{{.Id}}", image]).strip()
        except CommandFailed:
            return None

    def key(self, image: str, seed: DatabaseSeed) -> tuple[str, str] | None:
        """The key of a seed of `image` made by `seed`, and the image's id (what seeds and copies run, so a tag
        that moves meanwhile changes nothing); None when the image is not on the engine (yet)."""
        if (image_id := self.image_id(image)) is None:
            return None
        recipe = {"image": image_id, "path": seed.path, "environment": seed.environment, "ready": seed.ready}
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20], image_id

    def ready(self, key: str) -> bool:
        return key not in self._broken and (self._markers / key).is_file()

    def volume(self, key: str) -> str:  # this service's own: two services on one engine each make theirs
        return f"po-seed-{self._env.marker[:12]}-{key}"

    def interrupted(self, volume: str) -> bool:
        """Whether the volume `volume` is the one created for a copy that never finished (the service stopped
        meanwhile): its mark is there and names the volume's nonce, so a volume compose created later under the
        same name (the preview closed, opened again) is never taken for one."""
        try:
            nonce = (self._copying / volume).read_text().strip()
            return bool(nonce) and self.label(volume) == nonce
        except (OSError, CommandFailed):
            return False

    def label(self, volume: str, name: str = COPY_LABEL) -> str:  # by default the nonce of the copy it was made for
        return volume_label(self._docker, volume, name)

    def create_volume(self, volume: str, labels: dict[str, str], key: str, log_to: DeploymentLog,
                      source: str | None = None) -> bool:
        """Create the empty volume `volume`, with the labels compose would give it, for a copy of the seed `key`
        (or of the volume `source`, a repository's seed); False (nothing created) when the seed is gone from the
        engine (it is made again after this deploy) or the volume turns out to exist (`volume create` of an
        existing name succeeds: a nonce label tells)."""
        try:
            present = self._engine.volume_exists(source or self.volume(key))
        except CommandFailed as exc:
            log_to.note(f"database seed not used ({exc}); the database initialises itself")
            return False
        if not present:  # `docker volume prune`: an empty seed is made again after this deploy
            log_to.note(f"database seed {key} is gone from the engine" +
                        ("" if source else "; the database initialises itself"))
            if source is None:
                (self._markers / key).unlink(missing_ok=True)
            return False
        return self._create_marked(volume, labels, log_to)

    def _create_marked(self, volume: str, labels: dict[str, str], log_to: DeploymentLog,
                       options: list[str] | None = None) -> bool:
        """`docker volume create` of `volume` with a nonce label, marked as being copied from before it exists;
        False (nothing of anyone's removed) when it could not be created or another's volume has the name."""
        nonce = uuid.uuid4().hex
        try:
            self._copying.mkdir(parents=True, exist_ok=True, mode=0o700)
            (self._copying / volume).write_text(nonce)  # before the volume exists: a crash from here on is seen
            self._docker(["volume", "create", *(options or []), *label_args({**labels, COPY_LABEL: nonce}),
                          volume], log_to=log_to)
            found = self.label(volume)
        except (CommandFailed, OSError) as exc:
            log_to.note(f"database seed not used ({exc}); the database initialises itself")
            return False
        if found != nonce:  # another's volume: never ours to fill or remove
            (self._copying / volume).unlink(missing_ok=True)
            log_to.note(f"database seed not used: {volume} exists; the database starts from it")
            return False
        return True

    def create_layer(self, volume: str, labels: dict[str, str], source: str, log_to: DeploymentLog,
                     spare: str | None = None) -> bool:
        """`volume` created as an overlay on the seed volume `source` (seed_layers.create_layer)."""
        return create_layer(self._docker, self._create_marked, volume, labels, source, log_to, spare)

    def layer(self, volume: str) -> str | None:  # of the overlay copy `volume`, as its label names it
        return layer_of(self._docker, volume, spare_prefix(self._env))

    def copy(self, volume: str, deployment_id: str, image_id: str, key: str, seed: DatabaseSeed,
             log_to: DeploymentLog, control: FlowControl, source: str | None = None, layered: bool = False) -> bool:
        """Fill `volume` with a copy of the seed `key`, made this preview's by the plugin's command. False when
        it failed (its container removed): the caller removes the volume (the database then initialises itself).
        `source`: the volume of a repository's data seed (data_seeds.py) to copy instead; its failure is the
        caller's to report."""
        name = copy_container(deployment_id)  # named: a client killed by a timeout or an abort leaves it running
        try:
            self._docker(["run", "--rm", "--interactive", "--name", name, "--network", "none", *BOUNDS,
                          "--label", f"{OWNER_LABEL}={self._env.marker}",
                          "--label", f"{DEPLOYMENT_LABEL}={deployment_id}",
                          # a layered copy holds the seed already: the command finds nothing to copy
                          "--mount", f"type=tmpfs,target={SEED_MOUNT}" if layered else
                          f"type=volume,source={source or self.volume(key)},target={SEED_MOUNT},readonly",
                          "--mount", f"type=volume,source={volume},target={seed.path}",
                          "--entrypoint", seed.command[0], image_id, *seed.command[1:]],
                         timeout=COPY_TIMEOUT, log_to=log_to, control=control,
                         stdin=seed.script.get_secret_value().encode())
        except CommandFailed as exc:
            self._quietly(["rm", "--force", name])
            if source is not None:  # a repository's seed: the deploy fails with the database's own lines
                lines = error_lines(exc.output) or exc.tail(5).splitlines()
                raise SeedFailed("The database seed could not be copied", "\n".join(lines)) from None
            log_to.note(f"database seed not used ({exc}); the database initialises itself")
            # The plugin's command failed, not docker (125; 126 and 127 a start it could not make, as a mount that
            # failed: a layered copy's caller copies instead) or the clock
            if exc.returncode not in (None, 125, 126, 127):
                # Not tried again by this process (an image without what the command needs would fail every
                # time); the seed is removed, so a seed pruned from the engine meanwhile is not read as empty.
                log.warning("database seed %s of %s failed a copy; not used until the service restarts", key,
                            image_id)
                with self._lock:
                    self._broken.add(key)
                (self._markers / key).unlink(missing_ok=True)
                self._quietly(["rm", "--force", holder_name(volume)])  # this failed copy's: it holds the seed
                self._remove_unpinned(self.volume(key), besides=volume)
            return False
        except BaseException:  # aborted (FlowAborted): the container must not go on writing
            self._quietly(["rm", "--force", name])
            raise
        (self._copying / volume).unlink(missing_ok=True)
        return True

    def discard_volume(self, volume: str) -> bool:
        """Remove a volume created for a copy that failed (and its layer, when it was one); False when it could not
        be removed."""
        layer = self.layer(volume) or layer_volume(volume)
        self._quietly(["rm", "--force", holder_name(volume)])  # a layered copy's (seed_layers.hold)
        try:
            self._docker(["volume", "rm", "--force", volume], timeout=120)
        except CommandFailed:
            return False
        self._quietly(["volume", "rm", "--force", layer])
        (self._copying / volume).unlink(missing_ok=True)
        return True

    def make_in_background(self, image: str, image_id: str, key: str, seed: DatabaseSeed) -> None:
        """Make the seed `key` of `image` in a thread of its own, unless it is ready or being made."""
        with self._lock:
            if key in self._making or key in self._broken or self.ready(key):
                return
            self._making.add(key)
        threading.Thread(target=self._make, args=(image, image_id, key, seed), name="database-seed",
                         daemon=True).start()

    def _make(self, image: str, image_id: str, key: str, seed: DatabaseSeed) -> None:
        name = self.volume(key)
        started = time.monotonic()
        made = False  # from here on, what fails removes only what this call made
        try:
            # Previews are layered on one made before (its marker lost): never removed or remade under them
            if pinned(self._docker, name):
                log.warning("database seed %s of %s not made: previews are layered on its volume", key, image)
                return
            self._quietly(["rm", "--force", "--volumes", name])  # a partial seed of an interrupted run
            self._quietly(["volume", "rm", "--force", name])
            labels = {SEED_LABEL: image, OWNER_LABEL: self._env.marker}
            self._docker(["volume", "create", *label_args(labels), name])
            made = True
            environment = [arg for pair in sorted(seed.environment.items()) for arg in ("--env", "=".join(pair))]
            self._docker(["run", "--detach", "--name", name, "--network", "none", *label_args(labels),
                          "--mount", f"type=volume,source={name},target={seed.path}", *environment, image_id])
            problem = await_ready(self._docker, name, seed.ready, MAKE_TIMEOUT, time.sleep)
            if problem is not None:
                raise RuntimeError(f"the seed's container {problem}" if problem.startswith("exited") else problem)
            self._docker(["stop", "--time", "60", name], timeout=120)  # a clean shutdown: a copy needs no recovery
            self._docker(["rm", "--volumes", name])
            self._markers.mkdir(parents=True, exist_ok=True, mode=0o700)
            (self._markers / key).touch()
            made = False  # ready: copies may be layered on it from now on
            log.info("database seed %s of %s made in %.1fs", key, image, time.monotonic() - started)
        except (CommandFailed, RuntimeError, OSError, ValueError) as exc:
            log.warning("database seed of %s could not be made: %s", image, exc)
            if made:
                self._quietly(["rm", "--force", "--volumes", name])
                self._quietly(["volume", "rm", "--force", name])
            return
        finally:
            with self._lock:
                self._making.discard(key)
        try:
            self._remove_others(image, key)
        except CommandFailed as exc:
            log.warning("earlier database seeds of %s not looked for: %s", image, exc)

    def _remove_others(self, image: str, key: str) -> None:
        """This service's seeds of an earlier id of the same image (pulled again, or a new recipe): no new preview
        uses them; those previews are layered on stay until `sweep` finds them unused."""
        listed = self._docker(["volume", "ls", "--quiet", "--filter", f"label={SEED_LABEL}={image}",
                               "--filter", f"label={OWNER_LABEL}={self._env.marker}"]).split()
        for name in listed:
            if name != self.volume(key):
                (self._markers / name.removeprefix(self.volume(""))).unlink(missing_ok=True)
                self._remove_unpinned(name)

    def sweep(self) -> None:
        """Remove this service's seeds no new preview uses (an earlier one of an image, a broken one) once no
        preview is layered on them; each held as being made meanwhile, so that no remake meets the removal."""
        try:
            listed = self._docker(["volume", "ls", "--quiet", "--filter", f"label={SEED_LABEL}",
                                   "--filter", f"label={OWNER_LABEL}={self._env.marker}"]).split()
        except CommandFailed:
            return
        for name, key in ((name, name.removeprefix(self.volume(""))) for name in listed):
            with self._lock:
                if key in self._making or (self._markers / key).is_file():
                    continue
                self._making.add(key)
            try:
                self._remove_unpinned(name)
            finally:
                with self._lock:
                    self._making.discard(key)

    def _remove_unpinned(self, volume: str, besides: str | None = None) -> None:
        """Remove the seed `volume` unless a preview (`besides` that one) is layered on it, or a copy reads it
        (`volume rm` refuses)."""
        try:
            if not pinned(self._docker, volume, besides):
                self._docker(["volume", "rm", volume], timeout=120)
        except CommandFailed:
            pass

    def _quietly(self, argv: list[str]) -> None:
        quietly(self._docker, argv)

def copy_container(deployment_id: str) -> str:
    """The container of a deployment's copy of a seed (labelled with the deployment, so a cleanup removes it)."""
    return f"po-seed-copy-{deployment_id}"


def volume_name(project: str, key: str, volume: dict[str, Any]) -> str:
    """The engine's name of a compose file's volume `key`: its `name`, else `<project>_<key>`, as compose names
    it."""
    return str(volume.get("name") or f"{project}_{key}")
