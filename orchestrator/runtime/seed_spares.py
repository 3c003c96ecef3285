"""Spare layers of a repository's layered seed (DatabaseSeed.layered: the built-in PostgreSQL and MySQL), made ahead
so that a new preview of the repository, or `/preview reset-db`, starts on a layer that already holds the seed's
files.

Why: a layered copy is ready in a fraction of a second whatever the seed's size, but overlayfs copies a file into
the layer the first time it is opened for writing — PostgreSQL opens a table's files so on its first query, MySQL's
RENAME TABLE into pr_<N> moves them — and a preview waited for those copies (1–3 s for 350 MB on this ext4 host;
docs/benchmarks.md). A spare is a layer (seed_layers.py) in which every regular file of the seed with one name has
been opened for writing once, by a container of the database's image running as the data's owner with no
capabilities and no network: the copies are made before anyone waits for them. Its size is then counted in a fresh
container; one larger than its seed (hard links a restore made, which the copies would split) is not kept.

A spare is the volume `po-spare-<marker>-<seed key>-<nonce>`, labelled with the service's owner marker and
SPARE_LABEL (the seed's volume); it is free while its marker `<state dir>/database-seeds/spares/<name>` exists (it
says the restore of the seed the spare was made on, and the spare's size).
Taking one removes the marker; the preview's overlay volume then names it (LAYER_VOLUME_LABEL) and it goes with that
volume (a reset, the preview's removal) or, after a crash, with `sweep`. Up to SEED_SPARES are kept per seed, made
a few seconds after the preview that took one started (so they do not compete with its first requests), and free
ones count against SEED_CACHE_GB beside the seeds: one that does not fit is not made, and `sweep` removes those
beyond the bound and those of seeds that are gone. Spares never pin a seed; one is taken only while its seed is
reserved (DataSeeds.prepare or `hold`).
"""

from __future__ import annotations

import json
import logging
import os
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
SLACK_BYTES = 16 * 2**20  # a spare may exceed its seed by a tenth and this (directories, the layer's own files)


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
        found = []
        for marker in self._dir.glob(f"{self._prefix}{key}-*" if key else f"{self._prefix}*"):
            try:
                found.append((marker.stat().st_mtime, marker.name))
            except FileNotFoundError:  # taken or swept meanwhile
                continue
        return [name for _, name in sorted(found)]

    def take(self, key: str) -> str | None:
        """A free spare of the seed `key` (reserved by the caller), no longer free; None when there is none. The
        caller calls `settle` once the preview's overlay volume names it, or failed to be made."""
        if not self.count:
            return None
        made = self._made_at().get(key)
        with self._lock:
            for name in self.free(key):
                marked = self._marked(name)
                (self._dir / name).unlink(missing_ok=True)  # one made on an earlier seed of that key: `sweep` takes it
                try:
                    present = marked is not None and marked[0] == made and self._engine.volume_exists(name)
                except CommandFailed:
                    present = False
                if present:
                    self._handed.add(name)
                    return name
        return None

    def _made_at(self) -> dict[str, str]:
        """When each seed kept was restored: a spare is made on one restore of its key, never used on another."""
        return {seed.key: repr(seed.made_at) for seed in self._seeds.listed()}

    def _marked(self, name: str) -> tuple[str, int] | None:
        """What a free spare's marker says: the restore of its seed it was made on, and its size."""
        try:
            raw = json.loads((self._dir / name).read_text())
            return str(raw["madeAt"]), int(raw["bytes"])
        except (OSError, ValueError, KeyError, TypeError):
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
            while len(self.free(key)) < self.count and self._fits(key):
                if not self._seeds.hold(key):  # being restored again, or removed
                    log.info("no spare of data seed %s made: it is being restored or removed", key)
                    return
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
        """Whether one more spare of `key` fits under SEED_CACHE_GB beside the seeds, the free spares and any being
        made (each counted at its seed's size until it is measured)."""
        sizes = self._sizes()
        spares = sum((self._marked(name) or ("", sizes.get(self._key(name), 0)))[1] for name in self.free())
        with self._lock:
            building = sum(sizes.get(self._key(name), 0) for name in self._building if not name.endswith("-view"))
        if key in sizes and sum(sizes.values()) + spares + building + sizes[key] <= self._seeds.cache_bytes:
            return True
        log.info("no spare of data seed %s made: it would not fit in SEED_CACHE_GB", key)
        return False

    def _make(self, key: str, image_id: str, seed: DatabaseSeed) -> bool:
        name = f"{self._prefix}{key}-{uuid.uuid4().hex[:8]}"
        view = f"{name}-view"
        labels = {OWNER_LABEL: self._env.marker, SPARE_LABEL: self._seeds.volume(key)}
        started = time.monotonic()
        made, seed_bytes = self._made_at().get(key, ""), self._sizes().get(key, 0)
        with self._lock:
            self._building.update((name, view))
        try:
            lower = mountpoint(self._docker, self._seeds.volume(key))
            top = prepare_layer(self._docker, name, labels, lower)
            owner = Path(lower).stat()
            self._docker(["volume", "create", *overlay_options(lower, top), *label_args(labels), view])
            # One name per file (`-links 1`: copies would split a hard link), none larger than the whole seed
            self._docker(["run", "--rm", "--name", name, "--network", "none", *BOUNDS, "--cap-drop", "ALL",
                          "--user", f"{owner.st_uid}:{owner.st_gid}", *label_args(labels),
                          "--mount", f"type=volume,source={view},target={seed.path}", "--entrypoint", "find",
                          image_id, seed.path, "-xdev", "-type", "f", "-links", "1", "-size",
                          f"-{seed_bytes // 1024 + 1}k", "-exec", "sh", "-c", OPEN_FOR_WRITING, "sh", "{}", "+"],
                         timeout=WARM_TIMEOUT)
            self._docker(["volume", "rm", view])
            size = self._measure(name, image_id, f"{owner.st_uid}:{owner.st_gid}")
            if size > seed_bytes + seed_bytes // 10 + SLACK_BYTES:
                raise OSError(f"the spare takes {size / 2**20:.0f} MB, its seed {seed_bytes / 2**20:.0f} MB")
            self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            partial = self._dir / f".partial-{name}"  # never read as a marker until whole
            partial.write_text(json.dumps({"madeAt": made, "bytes": size}))
            os.replace(partial, self._dir / name)
        except (CommandFailed, OSError, ValueError) as exc:
            detail = exc.tail(3) if isinstance(exc, CommandFailed) else str(exc)
            log.warning("spare of data seed %s could not be made: %s", key, detail)
            for argv in (["rm", "--force", name], ["volume", "rm", "--force", view, name]):
                self._quietly(argv)
            return False
        finally:
            with self._lock:
                self._building.difference_update((name, view))
        log.info("spare %s of data seed %s made in %.1fs", name, key, time.monotonic() - started)
        return True

    def _measure(self, name: str, image_id: str, user: str) -> int:
        """The bytes of a spare's upper directory, counted by the image's `du` in a fresh container that mounts it
        read only, as the data's owner (with no capabilities, root could not read the data's private directories)."""
        out = self._docker(["run", "--rm", "--network", "none", *BOUNDS, "--cap-drop", "ALL", "--user", user,
                            "--mount", f"type=volume,source={name},target=/po-spare,readonly",
                            "--entrypoint", "du", image_id, "-sk", "/po-spare/upper"], timeout=600)
        return int(out.split()[0]) * 1024

    def sweep(self) -> list[str]:
        """Remove the spares no preview has and none may take — of a seed that is gone or was restored again since,
        made halfway, left by a preview removed meanwhile, beyond SEED_SPARES, or free beyond SEED_CACHE_GB (those
        of the least recently used seeds first) — but not one being made or just taken. The names removed; none
        when the engine cannot list them (the next sweep looks again)."""
        seeds = self._seeds.listed()  # most recently used first
        budget = self._seeds.cache_bytes - sum(seed.size_bytes for seed in seeds)
        order = {seed.key: index for index, seed in enumerate(seeds)}
        made = self._made_at()
        kept: dict[str, int] = {}
        doomed = []
        with self._lock:  # what overlay volumes name is listed after any spare taken before was settled
            try:
                listed = self._docker(["volume", "ls", "--quiet", "--filter",
                                       f"label={OWNER_LABEL}={self._env.marker}", "--filter", f"label={SPARE_LABEL}"])
                named = set(self._docker(["volume", "ls", "--filter", f"label={LAYER_VOLUME_LABEL}", "--format",
                                          f'{{{{.Label "{LAYER_VOLUME_LABEL}"}}}}']).split())
            except CommandFailed as exc:
                log.warning("spares of data seeds could not be listed: %s", exc)
                return []
            for name in sorted(listed.split(), key=lambda n: order.get(self._key(n), len(order))):
                key = self._key(name)
                if not name.startswith(self._prefix) or name in self._building | self._handed or name in named:
                    continue
                marked = self._marked(name)
                if marked is not None and marked[0] == made.get(key) and kept.get(key, 0) < self.count and \
                        marked[1] <= budget:
                    budget -= marked[1]
                    kept[key] = kept.get(key, 0) + 1
                    continue
                (self._dir / name).unlink(missing_ok=True)  # no longer free: nothing takes it from here on
                doomed.append(name)
        return [name for name in doomed if self._quietly(["volume", "rm", "--force", name])]

    def _key(self, name: str) -> str:
        """The seed key in a spare's (or its view's) name."""
        return name.removeprefix(self._prefix).removesuffix("-view").rsplit("-", 1)[0]

    def _quietly(self, argv: list[str]) -> bool:
        try:
            self._docker(argv, timeout=120)
        except CommandFailed:
            return False
        return True
