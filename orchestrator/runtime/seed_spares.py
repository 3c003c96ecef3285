"""Spare layers of a repository's layered seed (DatabaseSeed.layered: PostgreSQL), made ahead so that a new preview
of the repository, or `/preview reset-db`, starts on a layer that already holds the seed's files.

Why: a layered copy is ready in a fraction of a second whatever the seed's size, but PostgreSQL opens a table's
files for writing, and overlayfs copies a file into the layer the first time it is opened so: a preview's first
query of a large table waited for that copy (1–3 s for 350 MB on this ext4 host; docs/benchmarks.md). A spare is a
layer (seed_layers.py) in which every regular file of the seed has been opened for writing once, by a container of
the database's image running as the data's owner with no capabilities and no network: the copies are made before
anyone waits for them.

A spare is the volume `po-spare-<marker>-<seed key>-<nonce>`, labelled with the service's owner marker and
SPARE_LABEL (the seed's volume); it is free while its marker `<state dir>/database-seeds/spares/<name>` exists.
Taking one removes the marker; the preview's overlay volume then names it (LAYER_VOLUME_LABEL) and it goes with that
volume (a reset, the preview's removal) or, after a crash, with `sweep`. Up to SEED_SPARES are kept per seed, made
a few seconds after the preview that took one started (so they do not compete with its first requests), and free
ones count against SEED_CACHE_GB beside the seeds: one that does not fit is not made, and `sweep` removes those
beyond the bound and those of seeds that are gone. Spares never pin a seed; one is taken only while its seed is
reserved (DataSeeds.prepare or `hold`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path

from orchestrator.plugin_api import OWNER_LABEL, CommandFailed, HostEnv
from orchestrator.plugin_api.types import DatabaseSeed
from orchestrator.runtime.compose_cli import DockerResources
from orchestrator.runtime.data_seeds import DataSeeds
from orchestrator.runtime.seed_containers import BOUNDS, label_args
from orchestrator.runtime.seed_layers import (
    LAYER_VOLUME_LABEL,
    mountpoint,
    overlay_options,
    prepare_layer,
    spare_prefix,
)

log = logging.getLogger("orchestrator.runtime.seeds")

SPARE_LABEL = "dev.preview-orchestrator.spare-of"  # on a spare layer and its view: the volume of its seed
REFILL_DELAY = 5.0  # after the start of the preview that took a spare
WARM_TIMEOUT = 600.0
# Opens each file named for writing and closes it, writing nothing: overlayfs copies it into the layer. `true`, not
# `:`: a failed redirection of a special built-in would end the shell (the file is then copied on first use).
OPEN_FOR_WRITING = 'for f do true >> "$f"; done; exit 0'


class SeedSpares:
    def __init__(self, env: HostEnv, state_dir: Path, docker: DockerResources, seeds: DataSeeds,
                 count: int) -> None:
        self._env = env
        self._engine = docker
        self._seeds = seeds
        self.count = count
        self._dir = state_dir / "database-seeds" / "spares"
        self._prefix = spare_prefix(env)
        self._lock = threading.Lock()
        self._making: set[str] = set()  # seed keys whose spares a thread is making
        self._building: set[str] = set()  # the spare (and its view) being made now
        self._handed: set[str] = set()  # spares taken whose preview's overlay volume may not name them yet

    def _docker(self, argv: list[str], timeout: float = 60) -> str:
        return self._engine.command(argv, None, timeout)

    def free(self, key: str | None = None) -> list[str]:
        """The free spares (of the seed `key`), oldest first."""
        pattern = f"{self._prefix}{key}-*" if key else f"{self._prefix}*"
        markers = sorted(self._dir.glob(pattern), key=lambda p: p.stat().st_mtime) if self._dir.is_dir() else []
        return [marker.name for marker in markers]

    def take(self, key: str) -> str | None:
        """A free spare of the seed `key` (reserved by the caller), no longer free; None when there is none. The
        caller calls `settle` once the preview's overlay volume names it, or failed to be made."""
        made = self._made_at().get(key)
        with self._lock:
            for name in self.free(key):
                current = self._marked(name) == made
                (self._dir / name).unlink(missing_ok=True)  # one made on an earlier seed of that key: `sweep` takes it
                try:
                    present = current and self._engine.volume_exists(name)
                except CommandFailed:
                    present = False
                if present:
                    self._handed.add(name)
                    return name
        return None

    def _made_at(self) -> dict[str, str]:
        """When each seed kept was restored: a spare is made on one restore of its key, never used on another."""
        return {seed.key: repr(seed.made_at) for seed in self._seeds.listed()}

    def _marked(self, name: str) -> str | None:
        try:
            return (self._dir / name).read_text()
        except OSError:
            return None

    def settle(self, name: str) -> None:
        with self._lock:
            self._handed.discard(name)

    def refill(self, key: str, image_id: str, seed: DatabaseSeed) -> None:
        """Make spares of the seed `key` in a thread of its own, REFILL_DELAY from now, until SEED_SPARES are free,
        the bound is reached or one fails; nothing when a thread makes them already."""
        if not self.count or not seed.layered:
            return
        with self._lock:
            if key in self._making:
                return
            self._making.add(key)
        threading.Thread(target=self._fill, args=(key, image_id, seed), name="seed-spare", daemon=True).start()

    def _fill(self, key: str, image_id: str, seed: DatabaseSeed) -> None:
        try:
            time.sleep(REFILL_DELAY)
            self.sweep()
            while len(self.free(key)) < self.count and self._fits(key) and self._seeds.hold(key):
                try:
                    if not self._make(key, image_id, seed):
                        return
                finally:
                    self._seeds.release(key)
        finally:
            with self._lock:
                self._making.discard(key)

    def _sizes(self) -> dict[str, int]:
        return {seed.key: seed.size_bytes for seed in self._seeds.listed()}

    def _fits(self, key: str) -> bool:
        """Whether one more spare of `key` fits under SEED_CACHE_GB beside the seeds and the free spares."""
        sizes = self._sizes()
        spares = sum(sizes.get(self._key(name), 0) for name in self.free())
        return key in sizes and sum(sizes.values()) + spares + sizes[key] <= self._seeds.cache_bytes

    def _make(self, key: str, image_id: str, seed: DatabaseSeed) -> bool:
        name = f"{self._prefix}{key}-{uuid.uuid4().hex[:8]}"
        view = f"{name}-view"
        labels = {OWNER_LABEL: self._env.marker, SPARE_LABEL: self._seeds.volume(key)}
        started = time.monotonic()
        made = self._made_at().get(key, "")
        with self._lock:
            self._building.update((name, view))
        try:
            lower = mountpoint(self._docker, self._seeds.volume(key))
            top = prepare_layer(self._docker, name, labels, lower)
            owner = Path(lower).stat()
            largest = self._sizes().get(key, 0) // 1024 + 1  # a larger file is sparse: never copied whole
            self._docker(["volume", "create", *overlay_options(lower, top), *label_args(labels), view])
            self._docker(["run", "--rm", "--name", name, "--network", "none", *BOUNDS, "--cap-drop", "ALL",
                          "--user", f"{owner.st_uid}:{owner.st_gid}", *label_args(labels),
                          "--mount", f"type=volume,source={view},target={seed.path}", "--entrypoint", "find",
                          image_id, seed.path, "-xdev", "-type", "f", "-size", f"-{largest}k",
                          "-exec", "sh", "-c", OPEN_FOR_WRITING, "sh", "{}", "+"], timeout=WARM_TIMEOUT)
            self._docker(["volume", "rm", view])
            self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            (self._dir / name).write_text(made)
        except (CommandFailed, OSError) as exc:
            log.warning("spare of data seed %s could not be made: %s", key, exc)
            for argv in (["rm", "--force", name], ["volume", "rm", "--force", view, name]):
                self._quietly(argv)
            return False
        finally:
            with self._lock:
                self._building.difference_update((name, view))
        log.info("spare %s of data seed %s made in %.1fs", name, key, time.monotonic() - started)
        return True

    def sweep(self) -> list[str]:
        """Remove the spares no preview has and none may take — of a seed that is gone or was restored again since,
        made halfway, left by a preview removed meanwhile, or free beyond SEED_CACHE_GB (those of the least recently
        used seeds first) — but not one being made or just taken. The names removed; none when the engine cannot
        list them (the next sweep looks again)."""
        try:
            listed = self._docker(["volume", "ls", "--quiet", "--filter", f"label={OWNER_LABEL}={self._env.marker}",
                                   "--filter", f"label={SPARE_LABEL}"]).split()
            named = set(self._docker(["volume", "ls", "--filter", f"label={LAYER_VOLUME_LABEL}", "--format",
                                      f'{{{{.Label "{LAYER_VOLUME_LABEL}"}}}}']).split())
        except CommandFailed as exc:
            log.warning("spares of data seeds could not be listed: %s", exc)
            return []
        seeds = self._seeds.listed()  # most recently used first
        budget = self._seeds.cache_bytes - sum(seed.size_bytes for seed in seeds)
        order = {seed.key: index for index, seed in enumerate(seeds)}
        made = self._made_at()
        removed = []
        with self._lock:
            for name in sorted(listed, key=lambda n: order.get(self._key(n), len(order))):
                key = self._key(name)
                if not name.startswith(self._prefix) or name in self._building | self._handed or name in named:
                    continue
                size = next((seed.size_bytes for seed in seeds if seed.key == key), 0)
                if key in made and self._marked(name) == made[key] and size <= budget:
                    budget -= size
                    continue
                (self._dir / name).unlink(missing_ok=True)
                if self._quietly(["volume", "rm", "--force", name]):
                    removed.append(name)
        return removed

    def _key(self, name: str) -> str:
        """The seed key in a spare's (or its view's) name."""
        return name.removeprefix(self._prefix).removesuffix("-view").rsplit("-", 1)[0]

    def _quietly(self, argv: list[str]) -> bool:
        try:
            self._docker(argv, timeout=120)
        except CommandFailed:
            return False
        return True
