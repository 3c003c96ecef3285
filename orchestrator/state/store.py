"""The tracking store: the spec's JSON file of deployment records and port allocations.

Writes are atomic (temporary file in the same directory, fsync, rename, fsync of the directory) and
serialised across processes by a lock file beside the store. A file that cannot be parsed is never
overwritten: every read and update fails with an error naming the file until an operator repairs it.

Reads are cached by the file's identity (device, inode, mtime, size: every write is a rename to a new inode;
the cached file stays open so its inode cannot be reused by a later write while it is cached), and each
record's JSON is kept beside it, so a write re-serialises only the records that changed and
`GET /api/previews` joins ready-made bytes (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from filelock import FileLock
from pydantic import BaseModel, ValidationError

from orchestrator.state.records import StoreFile

T = TypeVar("T")

LOCK_TIMEOUT_SECONDS = 30


class StoreError(Exception):
    """The tracking store could not be read or written; the message names the file."""


FileIdentity = tuple[int, int, int, int]  # device, inode, mtime in ns, size
Fragment = tuple[BaseModel, bytes, bytes]  # the model, its JSON, its `"key": JSON` line in the file
Fragments = dict[str, dict[str, Fragment]]


@dataclass(frozen=True)
class Snapshot:
    """The parsed store at one file identity, with each record's JSON. Records are frozen, so shared."""

    identity: FileIdentity | None
    data: StoreFile
    record_json: Fragments  # "deployments" and "portAllocations": key -> fragment
    pinned: BinaryIO | None = None  # the file read, held open so its inode stays unique while cached

    def copy(self) -> StoreFile:
        """A StoreFile the caller may change without touching the cached one."""
        return StoreFile.model_construct(deployments=dict(self.data.deployments),
                                         portAllocations=dict(self.data.portAllocations))


class DeploymentStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_SECONDS)
        # Threads of this process queue on a mutex first: FileLock makes waiters poll (every 50 ms), which
        # capped a busy service at about 20 store writes a second (bench/ack, docs/benchmarks.md).
        self._thread_lock = threading.Lock()
        self._cache: Snapshot | None = None
        self._cache_lock = threading.Lock()

    def read(self) -> StoreFile:
        """Current contents; an absent file is an empty store."""
        return self.snapshot().copy()

    def records_json(self) -> list[bytes]:
        """Every record as the JSON `GET /api/previews` lists, without re-serialising unchanged ones."""
        snapshot = self.snapshot()
        return [snapshot.record_json["deployments"][key][1] for key in snapshot.data.deployments]

    def count_by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.snapshot().data.deployments.values():
            counts[record.status] = counts.get(record.status, 0) + 1
        return counts

    def snapshot(self) -> Snapshot:
        try:
            identity = self._identity()
        except FileNotFoundError:
            return Snapshot(None, StoreFile(), {})
        except OSError as exc:
            raise StoreError(f"Tracking store {self.path} cannot be read: {exc.strerror}") from exc
        cached = self._cache
        if cached is not None and cached.identity == identity:
            return cached
        try:
            pinned = self.path.open("rb")
        except FileNotFoundError:
            return Snapshot(None, StoreFile(), {})
        except OSError as exc:
            raise StoreError(f"Tracking store {self.path} cannot be read: {exc.strerror}") from exc
        try:
            identity = _identity(os.fstat(pinned.fileno()))  # of what is read, should a write land meanwhile
            raw = pinned.read()
        except OSError as exc:
            pinned.close()
            raise StoreError(f"Tracking store {self.path} cannot be read: {exc.strerror}") from exc
        try:
            data = StoreFile.model_validate_json(raw)
        except ValidationError as exc:
            pinned.close()
            first = exc.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "document"
            raise StoreError(
                f"Tracking store {self.path} is corrupt ({where}: {first['msg']}); "
                "it was left untouched for repair"
            ) from exc
        snapshot = Snapshot(identity, data, _record_json(data, cached), pinned)
        self._replace_cache(snapshot)
        return snapshot

    def update(self, change: Callable[[StoreFile], T]) -> T:
        """Apply `change` to the current contents under the lock and write the result atomically."""
        with self._locked():
            before = self.snapshot()
            data = before.copy()
            result = change(data)
            record_json = _record_json(data, before)
            self._write(data, record_json)
            try:
                pinned = self.path.open("rb")
                self._replace_cache(Snapshot(_identity(os.fstat(pinned.fileno())), data, record_json, pinned))
            except OSError:
                pass  # written; the next read parses it again
            return result

    def _identity(self) -> FileIdentity:
        return _identity(self.path.stat())

    def _replace_cache(self, snapshot: Snapshot) -> None:
        with self._cache_lock:
            old, self._cache = self._cache, snapshot
        if old is not None and old.pinned is not None and old is not snapshot:
            old.pinned.close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._thread_lock, self._lock:
                yield
        except OSError as exc:
            raise StoreError(f"Tracking store {self.path} cannot be written: {exc.strerror or exc}") from exc

    def _write(self, data: StoreFile, record_json: Fragments) -> None:
        payload = _document(data, record_json)
        fd, tmp_name = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, self.path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _identity(st: os.stat_result) -> FileIdentity:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _record_json(data: StoreFile, previous: Snapshot | None) -> Fragments:
    """Each record's and allocation's JSON, reused from `previous` where the model is the same object
    (models are frozen, so the same object means the same JSON)."""
    fragments: Fragments = {}
    for section, models in (("deployments", data.deployments), ("portAllocations", data.portAllocations)):
        old = previous.record_json.get(section, {}) if previous else {}
        current: dict[str, Fragment] = {}
        for key, model in models.items():
            kept = old.get(key)
            if kept is None or kept[0] is not model:
                value = model.model_dump_json().encode()
                kept = (model, value, json.dumps(key).encode() + b": " + value)
            current[key] = kept
        fragments[section] = current
    return fragments


def _document(data: StoreFile, fragments: Fragments) -> bytes:
    """The store file: one line per record and allocation, so it stays readable and diffable."""
    def section(name: str, keys: Iterable[str]) -> bytes:
        lines = fragments[name]
        return b",\n".join([lines[key][2] for key in keys])

    return (b'{"deployments": {\n' + section("deployments", data.deployments) + b'\n},\n"portAllocations": {\n'
            + section("portAllocations", data.portAllocations) + b"\n}}\n")
