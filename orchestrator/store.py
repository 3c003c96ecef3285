"""The tracking store: the spec's JSON file of deployment records and port allocations.

Writes are atomic (temporary file in the same directory, fsync, rename, fsync of the directory) and
serialised across processes by a lock file beside the store. A file that cannot be parsed is never
overwritten: every read and update fails with an error naming the file until an operator repairs it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from filelock import FileLock
from pydantic import ValidationError

from orchestrator.models import StoreFile

T = TypeVar("T")

LOCK_TIMEOUT_SECONDS = 30


class StoreError(Exception):
    """The tracking store could not be read or written; the message names the file."""


class DeploymentStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_SECONDS)

    def read(self) -> StoreFile:
        """Current contents; an absent file is an empty store."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return StoreFile()
        except OSError as exc:
            raise StoreError(f"Tracking store {self.path} cannot be read: {exc.strerror}") from exc
        try:
            return StoreFile.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "document"
            raise StoreError(
                f"Tracking store {self.path} is corrupt ({where}: {first['msg']}); "
                "it was left untouched for repair"
            ) from exc

    def update(self, change: Callable[[StoreFile], T]) -> T:
        """Apply `change` to the current contents under the lock and write the result atomically."""
        with self._locked():
            data = self.read()
            result = change(data)
            self._write(data)
            return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock:
                yield
        except OSError as exc:
            raise StoreError(f"Tracking store {self.path} cannot be written: {exc.strerror or exc}") from exc

    def _write(self, data: StoreFile) -> None:
        payload = json.dumps(data.model_dump(mode="json"), indent=2, sort_keys=True).encode() + b"\n"
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
