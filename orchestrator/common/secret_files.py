"""Secrets the service keeps in its state directory: files of mode 0600, created once, never overwritten.

- `db-password.key`: the key from which each preview's database password is derived. It is the service's
  own, so rotating CODEHOST_WEBHOOK_SECRET never locks a preview out of its database volume. When it is first
  created on a host that already has previews (whose passwords came from the webhook secret, as earlier
  versions derived them), it starts as that secret, so their volumes stay usable.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("orchestrator.common.secret_files")


def read_or_create(path: Path, create: Callable[[], bytes]) -> bytes:
    """The content of `path`, written first with `create()` when it does not exist (mode 0600, O_EXCL, no link
    followed); a file readable by others is narrowed to 0600 with a warning."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return _read_private(path)
    value = create()
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(value)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return value


def _read_private(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
        if mode & 0o077:
            log.warning("%s was readable by others (mode %o); narrowed to 0600", path, mode)
            os.fchmod(handle.fileno(), 0o600)
        value = handle.read()
    if not value:
        raise OSError(f"{path} is empty; remove it to have a new one created")
    return value


def random_key() -> bytes:
    return secrets.token_hex(32).encode()
