"""A repository's seed (preview-config.yml `seed`) on this host's Docker engine: its dump restored once per
(database image, dump content, commands, repository) into a data directory of its own — a *data seed* — that
every new preview's database volume then starts as a copy of (database_seeds.py copies it as it copies an empty
seed). Restoring a large dump takes minutes; a copy takes as long as copying the files.

Everything a restore runs comes from a pull request (the dump, the commands, what the SQL does), so it runs in a
container of the database's image with no network, the bounds of a preview's container, nothing of the host or
the service in its environment, and the dump mounted read only from a copy the service made (never the
checkout's path, which a link could turn elsewhere). A seed is keyed by the repository's identity as well as its
content: two repositories with the same dump never share one, and nothing names another repository's seed (the
preview's containers never mount a seed; the copy runs in a container of the service).

Seeds are bounded by SEED_CACHE_GB (the least recently used go first) and removed when unused for
CLEANUP_TTL_DAYS; `<state dir>/database-seeds/data/<key>.json` says what each holds (`preview-orchestrator
seeds`). Its file's time is when a preview last started from it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from orchestrator.plugin_api import OWNER_LABEL, Check, CommandFailed, DeploymentLog, FlowControl, HostEnv
from orchestrator.plugin_api.runtime import SeedFailed
from orchestrator.plugin_api.types import SEED_INPUT, DatabaseSeed, DataSeed
from orchestrator.runtime.compose_cli import DockerResources
from orchestrator.runtime.seed_catalogue import SeedInfo, listed_seeds, record_seed, seeds_check
from orchestrator.runtime.seed_containers import BOUNDS, await_ready, error_lines, label_args
from orchestrator.runtime.seed_dumps import DumpDigests, content_key, open_dump, seed_key, stage_dump
from orchestrator.runtime.seed_layers import pinned

log = logging.getLogger("orchestrator.runtime.seeds")

DATA_SEED_LABEL = "dev.preview-orchestrator.data-seed"  # on a data seed's volume: the repository it belongs to
FROM_SEED_LABEL = "dev.preview-orchestrator.from-seed"  # on a preview's volume copied from a data seed: its content
RESTORE_TIMEOUT = 3600.0
LOCK_PAUSE = 0.5  # a deploy waiting for another's restore of the same seed looks for cancellation this often
COMMAND_TIMEOUT = 1800.0
READY_TIMEOUT = 300.0
WORKDIR = "/tmp"  # noqa: S108 - the seed container's own /tmp, where its commands start


class DataSeeds:
    def __init__(self, env: HostEnv, state_dir: Path, docker: DockerResources, cache_bytes: int,
                 unused_days: int) -> None:
        self._env = env
        self._engine = docker
        self.state_dir = state_dir
        self._dir = state_dir / "database-seeds" / "data"
        self._inputs = state_dir / "database-seeds" / "input"
        self.cache_bytes = cache_bytes
        self._unused_seconds = unused_days * 86400
        self._lock = threading.Lock()
        self._making: dict[str, threading.Lock] = {}
        self._in_use: dict[str, int] = {}
        self._digests = DumpDigests()

    def volume(self, key: str) -> str:
        return f"po-data-{self._env.marker[:12]}-{key}"

    def _docker(self, argv: list[str], timeout: float = 60, log_to: DeploymentLog | None = None,
                control: FlowControl | None = None) -> str:
        return self._engine.command(argv, log_to, timeout, control)

    # -- making --------------------------------------------------------------------------------------------------

    def prepare(self, image: str, image_id: str, seed: DatabaseSeed, data: DataSeed, log_to: DeploymentLog,
                control: FlowControl) -> tuple[str, str]:
        """The key of the data seed of `data` for `image`, restored now unless it is ready (one restore of a seed at
        a time: a second deploy that needs it waits for the first), and the key of what it holds (the repository's
        content and commands, whatever the image). The seed is reserved — eviction leaves it — until the caller
        calls `release(key)`, once. SeedFailed with the database's error lines."""
        if seed.restore is None:
            raise SeedFailed("The database cannot be seeded", "its plugin gives no way to restore a dump")
        found = seed.restore.command_for(data.name)
        if found is None:
            raise SeedFailed("The database seed could not be restored",
                             f"{data.source}: not a format this database restores "
                             f"({', '.join(sorted(seed.restore.formats))})")
        suffix, restore = found
        with open_dump(Path(data.path)) as source:  # what is hashed is what is restored: one open file
            digest = self._digests.of(source)
            content = content_key(data, suffix, digest)
            key = seed_key(image_id, seed, restore, content)
            with self._lock:
                making = self._making.setdefault(key, threading.Lock())
            while not making.acquire(timeout=LOCK_PAUSE):  # never two restores of one seed; the second finds it
                control.check()
            try:
                if self.ready(key) and self._volume_present(key, log_to):
                    log_to.note(f"database seed {key} ({data.source}) is ready")
                    os.utime(self._dir / f"{key}.json")  # the most recently used: eviction takes it last
                else:
                    staged = stage_dump(source, digest, self._inputs / f"{key}{suffix}")
                    self._make(key, image, image_id, seed, data, staged, suffix, restore, log_to, control)
                with self._lock:  # while the restore's lock is held: no eviction in between
                    self._in_use[key] = self._in_use.get(key, 0) + 1
            finally:
                making.release()
        return key, content

    def hold(self, key: str) -> bool:
        """Reserve the seed `key` as `prepare` does (the caller calls `release`); False when it is not ready, or is
        being restored or removed."""
        with self._lock:
            making = self._making.setdefault(key, threading.Lock())
        if not making.acquire(blocking=False):
            return False
        try:
            with self._lock:
                if self.ready(key):
                    self._in_use[key] = self._in_use.get(key, 0) + 1
                    return True
            return False
        finally:
            making.release()

    def release(self, key: str) -> None:
        """The end of a reservation `prepare` made: the copy is done, or will not be made."""
        with self._lock:
            self._in_use[key] -= 1
            if not self._in_use[key]:
                del self._in_use[key]

    def ready(self, key: str) -> bool:
        return (self._dir / f"{key}.json").is_file()

    def _volume_present(self, key: str, log_to: DeploymentLog) -> bool:
        """Whether the seed's volume is still on the engine; a seed pruned from it (`docker volume prune`) is
        forgotten, so that it is restored again."""
        try:
            if self._engine.volume_exists(self.volume(key)):
                return True
        except CommandFailed as exc:
            raise SeedFailed("The database seed could not be copied", f"docker: {exc.tail(3)}") from None
        log_to.note(f"database seed {key} is gone from the engine: it is restored again")
        (self._dir / f"{key}.json").unlink(missing_ok=True)
        return False

    def _make(self, key: str, image: str, image_id: str, seed: DatabaseSeed, data: DataSeed, staged: Path,
              suffix: str, restore: list[str], log_to: DeploymentLog, control: FlowControl) -> None:
        assert seed.restore is not None
        name = self.volume(key)
        started = time.monotonic()
        log_to.note(f"database seed {key}: restoring {data.source}")
        try:
            self._quietly(["rm", "--force", "--volumes", name])  # what an interrupted restore left
            self._quietly(["volume", "rm", "--force", name])
            labels = {DATA_SEED_LABEL: data.repository, OWNER_LABEL: self._env.marker}
            self._docker(["volume", "create", *label_args(labels), name], log_to=log_to)
            environment = [arg for pair in sorted(seed.environment.items()) for arg in ("--env", "=".join(pair))]
            dump = f"{SEED_INPUT}/dump{suffix}"
            self._docker(["run", "--detach", "--name", name, "--network", "none", *BOUNDS, *label_args(labels),
                          "--mount", f"type=volume,source={name},target={seed.path}",
                          "--mount", f"type=bind,source={staged},target={dump},readonly",
                          *environment, image_id], log_to=log_to)
            self._wait_ready(name, seed, control)
            self._run(name, [], [*restore, dump], RESTORE_TIMEOUT, f"restoring {data.source}", log_to, control)
            for number, command in enumerate(data.commands, start=1):
                self._run(name, ["--env", f"DATABASE_URL={seed.restore.url}", "--workdir", WORKDIR],
                          ["sh", "-c", command], COMMAND_TIMEOUT, f"seed command {number}", log_to, control)
            if seed.restore.finish:
                self._run(name, [], seed.restore.finish, RESTORE_TIMEOUT, "finishing the seed", log_to, control)
            self._docker(["stop", "--time", "60", name], timeout=120)  # a clean shutdown: a copy needs no recovery
            self._docker(["rm", name])
            size = self._size(name, image_id, seed.path)
            seconds = time.monotonic() - started
            record_seed(self._dir, SeedInfo(key=key, repository=data.repository, source=data.source, image=image,
                                            size_bytes=size, made_at=time.time(), seconds=round(seconds, 2),
                                            used_at=time.time()))
        except CommandFailed as exc:
            self._discard(name)
            raise SeedFailed("The database seed could not be restored", f"docker: {exc.tail(5)}") from None
        except (OSError, ValueError) as exc:
            self._discard(name)
            raise SeedFailed("The database seed could not be restored", str(exc)) from None
        except BaseException:
            self._discard(name)
            raise
        finally:
            staged.unlink(missing_ok=True)
        log_to.note(f"database seed {key} restored in {seconds:.1f}s ({size / 2**20:.0f} MB)")
        log.info("data seed %s of %s (%s) restored in %.1fs", key, data.repository, data.source, seconds)
        self.evict(keep=key)

    def _wait_ready(self, name: str, seed: DatabaseSeed, control: FlowControl) -> None:
        def pause(seconds: float) -> None:
            control.wait(seconds)
            control.check()

        problem = await_ready(self._docker, name, seed.ready, READY_TIMEOUT, pause)
        if problem is not None and problem.startswith("exited"):
            raise SeedFailed("The database seed could not be restored",
                             f"the database {problem} before it was ready:\n{self._logs(name)}")
        if problem is not None:
            raise SeedFailed("The database seed could not be restored", f"the database was {problem}")

    def _size(self, volume: str, image_id: str, path: str) -> int:
        """The seed's bytes, counted by the image's own `du` in a container of the service's (the one the
        restore's commands ran in could have replaced it)."""
        out = self._docker(["run", "--rm", "--network", "none", *BOUNDS,
                            "--mount", f"type=volume,source={volume},target={path},readonly",
                            "--entrypoint", "du", image_id, "-sk", path], timeout=600)
        return int(out.split()[0]) * 1024

    def _run(self, name: str, options: list[str], argv: list[str], timeout: float, what: str,
             log_to: DeploymentLog, control: FlowControl) -> None:
        """`docker exec` in the seed's container; SeedFailed with the lines of its output that say what failed
        (never the whole output: a restore prints a line per statement)."""
        try:
            self._docker(["exec", *options, name, *argv], timeout=timeout, control=control)
        except CommandFailed as exc:
            if exc.timed_out:
                raise SeedFailed("The database seed could not be restored", f"{what}: timed out") from None
            lines = error_lines(exc.output) or exc.tail(5).splitlines()
            log_to.note(f"{what} failed (exit {exc.returncode})")
            raise SeedFailed("The database seed could not be restored",
                             "\n".join([f"{what} exited with code {exc.returncode}:", *lines])) from None

    def _logs(self, name: str) -> str:
        try:
            return "\n".join(self._docker(["logs", "--tail", "20", name]).splitlines()[-20:])
        except CommandFailed:
            return ""

    # -- copies --------------------------------------------------------------------------------------------------

    def reserved(self, key: str) -> int:
        with self._lock:
            return self._in_use.get(key, 0)

    # -- bounds --------------------------------------------------------------------------------------------------

    def listed(self) -> list[SeedInfo]:
        return listed_seeds(self.state_dir)

    def check(self) -> Check:
        """doctor's line of the seeds kept, their spares and their bound."""
        return seeds_check(self.state_dir, self.cache_bytes)

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove the least recently used seeds beyond SEED_CACHE_GB, and any unused for CLEANUP_TTL_DAYS; never
        `keep` (just made) or one a deploy reserved (it copies it, or is about to). The keys removed."""
        removed, total = [], 0
        now = time.time()
        for seed in self.listed():  # most recent first: what is over the bound is the oldest
            total += seed.size_bytes
            stale = self._unused_seconds and now - seed.used_at > self._unused_seconds
            if seed.key == keep or (total <= self.cache_bytes and not stale):
                continue
            if self.remove(seed.key):
                total -= seed.size_bytes
                removed.append(seed.key)
        self._sweep_inputs()
        return removed

    def remove(self, key: str) -> bool:
        """Remove the seed `key` unless a restore, a copy or a layered preview uses it; False when it stays. Holds
        the seed's lock throughout, so that no deploy prepares it meanwhile."""
        with self._lock:
            making = self._making.setdefault(key, threading.Lock())
        if not making.acquire(blocking=False):  # being restored, or prepared by a deploy right now
            return False
        try:
            with self._lock:
                if key in self._in_use:
                    return False
            if pinned(self._docker, self.volume(key)):  # a preview layered on it reads its files
                return False
            self._docker(["volume", "rm", "--force", self.volume(key)], timeout=120)
            (self._dir / f"{key}.json").unlink(missing_ok=True)
        except CommandFailed as exc:  # the engine could not say or remove it: it stays, listed, for the next round
            log.warning("data seed %s could not be removed: %s", key, exc)
            return False
        finally:
            making.release()
        log.info("data seed %s removed", key)
        return True

    def _sweep_inputs(self) -> None:
        """Dumps staged for a restore that a crash interrupted (a restore removes its own)."""
        with self._lock:
            busy = {key for key, lock in self._making.items() if lock.locked()}
        for staged in self._inputs.iterdir() if self._inputs.is_dir() else []:
            if staged.name.split(".", 1)[0] not in busy:
                staged.unlink(missing_ok=True)

    def _discard(self, name: str) -> None:
        self._quietly(["rm", "--force", "--volumes", name])
        self._quietly(["volume", "rm", "--force", name])

    def _quietly(self, argv: list[str]) -> None:
        try:
            self._docker(argv, timeout=120)
        except CommandFailed:
            pass
