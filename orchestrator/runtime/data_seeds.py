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

import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from orchestrator.adapters.commands import CommandFailed, DeploymentLog
from orchestrator.adapters.host_env import HostEnv
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.labels import OWNER_LABEL
from orchestrator.plugin_api.runtime import SeedFailed
from orchestrator.plugin_api.types import SEED_INPUT, DatabaseSeed, DataSeed
from orchestrator.runtime.compose_cli import DockerResources

log = logging.getLogger("orchestrator.runtime.seeds")

DATA_SEED_LABEL = "dev.preview-orchestrator.data-seed"  # on a data seed's volume: the repository it belongs to
FROM_SEED_LABEL = "dev.preview-orchestrator.from-seed"  # on a preview's volume copied from a data seed: its content
LAYER_LABEL = "dev.preview-orchestrator.layered-on"  # on an overlay copy of a seed and its layer: the seed's volume
RESTORE_TIMEOUT = 3600.0
LOCK_PAUSE = 0.5  # a deploy waiting for another's restore of the same seed looks for cancellation this often
COMMAND_TIMEOUT = 1800.0
READY_TIMEOUT = 300.0
READY_PAUSE = 0.2
# A restore is the service's work for one repository: more than a preview's half core, still bounded.
BOUNDS = ["--cpus", "1", "--memory", "1g", "--pids-limit", "1024", "--cap-drop", "NET_RAW",
          "--security-opt", "no-new-privileges", "--log-driver", "json-file", "--log-opt", "max-size=10m"]
ERROR_WORDS = re.compile(r"\b(ERROR|FATAL|PANIC|error)\b[:\s]")
MAX_ERROR_LINES = 10
CHUNK = 1024 * 1024
MAX_DIGESTS = 1000
WORKDIR = "/tmp"  # noqa: S108 - the seed container's own /tmp, where its commands start


@dataclass(frozen=True)
class SeedInfo:
    """One data seed, as `<state dir>/database-seeds/data/<key>.json` and its file's time say."""

    key: str
    repository: str
    source: str
    image: str
    size_bytes: int
    made_at: float
    seconds: float
    used_at: float


class DataSeeds:
    def __init__(self, env: HostEnv, state_dir: Path, docker: DockerResources, cache_bytes: int,
                 unused_days: int) -> None:
        self._env = env
        self._engine = docker
        self._dir = state_dir / "database-seeds" / "data"
        self._inputs = state_dir / "database-seeds" / "input"
        self.cache_bytes = cache_bytes
        self._unused_seconds = unused_days * 86400
        self._lock = threading.Lock()
        self._making: dict[str, threading.Lock] = {}
        self._in_use: dict[str, int] = {}
        self._digests: dict[tuple[int, int, int, int, int], str] = {}  # (device, inode, size, mtime, ctime)

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
        with self._open(Path(data.path)) as source:  # what is hashed is what is restored: one open file
            digest = self._digest(source)
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
                    staged = self._stage(source, digest, key, suffix)
                    self._make(key, image, image_id, seed, data, staged, suffix, restore, log_to, control)
                with self._lock:  # while the restore's lock is held: no eviction in between
                    self._in_use[key] = self._in_use.get(key, 0) + 1
            finally:
                making.release()
        return key, content

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

    @contextmanager
    def _open(self, path: Path) -> Iterator[BinaryIO]:
        """The dump, opened without following a link at its last step (the flows checked the rest of the path); a
        regular file or SeedFailed."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise SeedFailed("The database seed could not be restored", f"{path.name}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as source:
            if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
                raise SeedFailed("The database seed could not be restored", f"{path.name} is not a regular file")
            yield source

    def _digest(self, source: BinaryIO) -> str:
        """sha256 of the open dump, remembered while the file is unchanged: the same inode, size, modification
        and change times (the change time is the kernel's, which no pull request can set back). A restore
        hashes the file again as it stages it and refuses a mismatch, so a remembered digest never names other
        content than what is restored."""
        info = os.fstat(source.fileno())
        known = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        with self._lock:
            if (digest := self._digests.get(known)) is not None:
                return digest
        digest = _sha256(source)
        with self._lock:
            if len(self._digests) >= MAX_DIGESTS:
                self._digests.clear()
            self._digests[known] = digest
        return digest

    def _stage(self, source: BinaryIO, digest: str, key: str, suffix: str) -> Path:
        """A copy of the dump the service owns, for the restore to mount (the checkout's file could be replaced by a
        link before the mount), made from the open file that was hashed and checked against that hash: a file
        rewritten meanwhile is never restored under the other content's key."""
        self._inputs.mkdir(parents=True, exist_ok=True, mode=0o700)
        staged = self._inputs / f"{key}{suffix}"
        copied = hashlib.sha256()
        source.seek(0)
        try:
            with open(staged, "wb") as target:
                while chunk := source.read(CHUNK):
                    copied.update(chunk)
                    target.write(chunk)
        except OSError as exc:
            staged.unlink(missing_ok=True)
            raise SeedFailed("The database seed could not be restored",
                             f"the dump could not be copied for the restore: {exc.strerror}") from None
        if copied.hexdigest() != digest:
            staged.unlink(missing_ok=True)
            raise SeedFailed("The database seed could not be restored", "the dump changed while it was read")
        staged.chmod(0o644)  # read by the database's own user in the container
        return staged

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
            self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            marker = self._dir / f"{key}.json"
            partial = marker.with_suffix(".partial")
            partial.write_text(json.dumps({"key": key, "repository": data.repository, "source": data.source,
                                           "image": image, "sizeBytes": size, "madeAt": time.time(),
                                           "seconds": round(seconds, 2)}))
            partial.replace(marker)
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
        return listed_seeds(self._dir.parent.parent)

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
            # A preview layered on it (DatabaseSeed.layered) reads its files: it stays until that preview goes.
            if self._docker(["volume", "ls", "--quiet", "--filter", f"label={LAYER_LABEL}={self.volume(key)}"]).split():
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


def await_ready(docker: Callable[..., str], name: str, ready: list[str], timeout: float,
                pause: Callable[[float], None]) -> str | None:
    """Run `ready` in the seed's container `name` until it succeeds (None), pausing READY_PAUSE between tries; else
    why it never will: `exited with code N` (the container stopped) or `not ready after Ns`."""
    started = time.monotonic()
    while True:
        try:
            docker(["exec", name, *ready], timeout=30)
            return None
        except CommandFailed:
            state = json.loads(docker(["container", "inspect", "--format", "{{json .State}}", name]))
            if state.get("Status") != "running":
                return f"exited with code {state.get('ExitCode')}"
            if time.monotonic() - started > timeout:
                return f"not ready after {timeout:.0f}s"
        pause(READY_PAUSE)


def label_args(labels: dict[str, str]) -> list[str]:
    return [arg for pair in labels.items() for arg in ("--label", "=".join(pair))]


def listed_seeds(state_dir: Path) -> list[SeedInfo]:
    """Every data seed the service with `state_dir` keeps, most recently used first."""
    directory = state_dir / "database-seeds" / "data"
    found = []
    for marker in directory.glob("*.json") if directory.is_dir() else []:
        try:
            raw = json.loads(marker.read_text())
            found.append(SeedInfo(key=str(raw["key"]), repository=str(raw["repository"]), source=str(raw["source"]),
                                  image=str(raw["image"]), size_bytes=int(raw["sizeBytes"]),
                                  made_at=float(raw["madeAt"]), seconds=float(raw["seconds"]),
                                  used_at=marker.stat().st_mtime))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda seed: seed.used_at, reverse=True)


def content_key(data: DataSeed, suffix: str, digest: str) -> str:
    """What a seed holds, whatever image restored it: the repository (never shared between two), the dump's content
    and format, and the commands run on it. A preview's volume is labelled with it (FROM_SEED_LABEL): a new image
    makes a new seed, never a reason to replace a preview's data."""
    recipe = {"repository": data.repository, "content": digest, "suffix": suffix, "commands": data.commands}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:24]


def seed_key(image_id: str, seed: DatabaseSeed, restore: list[str], content: str) -> str:
    """A data seed: what it holds (`content_key`), the image (by id) and the plugin's whole recipe."""
    recipe = {"image": image_id, "path": seed.path, "environment": seed.environment, "ready": seed.ready,
              "restore": restore, "url": seed.restore.url if seed.restore else None,
              "finish": seed.restore.finish if seed.restore else None, "content": content}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:24]


def _sha256(source: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def error_lines(output: str) -> list[str]:
    """The lines of a database tool's output that say what failed, from the error word on (psql prefixes its own
    `psql:FILE:LINE: `), at most MAX_ERROR_LINES."""
    found = []
    for line in output.splitlines():
        if match := ERROR_WORDS.search(line):
            found.append(line[match.start():].strip()[:300])
    return found[:MAX_ERROR_LINES]
