"""Paths inside a pull request's checkout, which its author controls: links that leave it are refused, and
what the service writes there never follows a link.

The service runs as root. A committed symlink such as `compose.preview.yml -> /etc/cron.d/x` would make a
plain `open(..., "w")` write wherever it points, and a link read by compose (an `env_file`, a bind source)
would hand a host file to the preview. So a checkout is scanned once it is on disk (and again after
`build_commands`, which may create files), and files are written by creating a new file beside the target
and renaming it over the name: a rename replaces a link, it never writes through it.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path

MAX_REPORTED = 5


class UnsafeCheckout(Exception):
    """The checkout holds links that leave it; the message names them."""


def inside(root: Path, path: str | Path) -> bool:
    """`path` (relative to `root`, or absolute) stays inside `root` once every link is followed."""
    text = str(path)
    if not text or text.startswith("~") or "\x00" in text:
        return False
    candidate = Path(text) if text.startswith("/") else root / text
    try:
        return candidate.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return False


def _unsafe_entries(root: Path) -> tuple[list[str], list[str]]:
    """Every symbolic link under `root` whose target, followed, is outside `root` (dangling ones included: what they
    point at could be created later); and every device node, FIFO or socket (a build command's: opening one runs a
    driver on the host, or waits)."""
    links: list[str] = []
    special: list[str] = []
    resolved_root = root.resolve()
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory) / name
            try:
                mode = path.lstat().st_mode
            except OSError:  # gone since the walk listed it
                continue
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                special.append(str(path.relative_to(root)))
            if not stat.S_ISLNK(mode):
                continue
            try:
                target = path.resolve()
            except (OSError, RuntimeError):  # a loop of links
                links.append(str(path.relative_to(root)))
                continue
            if not target.is_relative_to(resolved_root):
                links.append(str(path.relative_to(root)))
    return sorted(links), sorted(special)


def check_links(root: Path) -> None:
    """Raise UnsafeCheckout when the checkout links outside itself, or holds special files."""
    links, special = _unsafe_entries(root)
    for found, what in ((links, "symbolic links that point outside it"),
                        (special, "special files (device nodes, FIFOs or sockets)")):
        if found:
            shown = ", ".join(found[:MAX_REPORTED]) + (f" and {len(found) - MAX_REPORTED} more"
                                                       if len(found) > MAX_REPORTED else "")
            raise UnsafeCheckout(f"The repository contains {what}: {shown}")


def write_new(directory: Path, name: str, text: str, mode: int = 0o644) -> Path:
    """Write `directory/name` without following a link at that name: a fresh file (O_EXCL|O_NOFOLLOW) is
    written and renamed over it. `name` is a plain file name, never a path."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a file name: {name!r}")
    target = directory / name
    temporary = directory / f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return target



def read_plain(directory: Path, name: str, limit: int = 1 << 20) -> str | None:
    """The text of `directory/name` when it is a regular file with no other hard link (a link at that name is not
    followed, a special file never opened: `_open_regular`), else None."""
    try:
        parent = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        fd = _open_regular(name, parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit).decode("utf-8", errors="replace")


def _open_regular(name: str, directory: int) -> int:
    """`name` in the directory `directory` opened for reading, when it is a regular file with no other hard link:
    looked at first through an O_PATH descriptor, which opens nothing (a device node's driver is never run, a FIFO
    never waited on), then opened again through it. OSError otherwise."""
    handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file")
        if info.st_nlink != 1:  # a checkout's files have one; one the build user linked may name any file
            raise OSError(errno.EPERM, "it has other hard links")
        return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)


def read_beneath(root: Path, path: Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `path`, a regular file inside `root`: its links resolved once (the file must then
    be inside `root`), then opened from `root` one directory at a time with no link followed — a link swapped in
    after the check (a process the pull request left running) makes the read fail, never reach another file — and
    read only once it is known to be a regular file with no other hard link (`_open_regular`). OSError with the
    reason."""
    try:
        base = os.path.realpath(root)
        relative = os.path.relpath(os.path.realpath(path), base)
    except ValueError:  # a NUL in the path
        raise OSError(errno.EINVAL, "its name cannot be read") from None
    parts = relative.split(os.sep)
    if relative == os.curdir or os.pardir in parts:
        raise OSError(errno.EXDEV, "it is not in the repository")
    directory = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            os.close(directory)
            directory = inner
        fd = _open_regular(parts[-1], directory)
    finally:
        os.close(directory)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit + 1)


def remove_tree(path: Path) -> None:
    """`path` gone, whatever it is: a link is removed itself, never what it points to."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
