"""The dump a data seed is restored from (data_seeds.py): opened without following a link, hashed (the hash
remembered while the file is unchanged), copied where the restore mounts it, and the keys its seed is named by.
What is hashed is what is restored: one open file serves all three."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from orchestrator.plugin_api.runtime import SeedFailed
from orchestrator.plugin_api.types import DatabaseSeed, DataSeed

CHUNK = 1024 * 1024
MAX_DIGESTS = 1000


@contextmanager
def open_dump(path: Path) -> Iterator[BinaryIO]:
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


class DumpDigests:
    """sha256 of open dumps, remembered while a file is unchanged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[int, int, int, int, int], str] = {}  # (device, inode, size, mtime, ctime)

    def of(self, source: BinaryIO) -> str:
        """sha256 of the open dump, remembered while the file is unchanged: the same inode, size, modification
        and change times (the change time is the kernel's, which no pull request can set back). A restore
        hashes the file again as it stages it and refuses a mismatch, so a remembered digest never names other
        content than what is restored."""
        info = os.fstat(source.fileno())
        known = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        with self._lock:
            if (digest := self._known.get(known)) is not None:
                return digest
        digest = _sha256(source)
        with self._lock:
            if len(self._known) >= MAX_DIGESTS:
                self._known.clear()
            self._known[known] = digest
        return digest


def stage_dump(source: BinaryIO, digest: str, staged: Path) -> Path:
    """A copy of the dump the service owns, for the restore to mount (the checkout's file could be replaced by a
    link before the mount), made from the open file that was hashed and checked against that hash: a file
    rewritten meanwhile is never restored under the other content's key."""
    staged.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
