"""A read-only, bounded view of a checkout for plugins: what a framework plugin may look at to choose how to
build (a lockfile, Cargo.toml, where `package main` is), without doing I/O of its own.

Every path stays inside the checkout once links are followed; files over a size bound, unreadable or not
UTF-8 read as absent; listings are bounded. A checkout is a pull request's, so nothing here trusts it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import tomllib
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 1024 * 1024
MAX_LISTED = 2000


class ProjectFiles:
    def __init__(self, root: Path, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.root = root.resolve()
        self._max_bytes = max_bytes

    def _path(self, relative: str) -> Path | None:
        if not relative or relative.startswith("/") or "\x00" in relative:
            return None
        try:
            path = (self.root / relative).resolve()
        except (OSError, RuntimeError):
            return None
        return path if path == self.root or path.is_relative_to(self.root) else None

    def is_file(self, relative: str) -> bool:
        path = self._path(relative)
        return path is not None and path.is_file()

    def is_dir(self, relative: str) -> bool:
        path = self._path(relative)
        return path is not None and path.is_dir()

    def read_text(self, relative: str) -> str | None:
        """The file's text, or None when it is absent, outside, too large or not UTF-8."""
        path = self._path(relative)
        if path is None or not path.is_file():
            return None
        try:
            if path.stat().st_size > self._max_bytes:
                return None
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def read_json(self, relative: str) -> Any:
        text = self.read_text(relative)
        if text is None:
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return None

    def read_toml(self, relative: str) -> dict[str, Any] | None:
        text = self.read_text(relative)
        if text is None:
            return None
        try:
            return tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError):
            return None

    def list_dir(self, relative: str = ".") -> list[str]:
        """Names in a directory (sorted, bounded); empty when it is absent or outside."""
        path = self._path(relative) if relative != "." else self.root
        if path is None or not path.is_dir():
            return []
        try:
            with os.scandir(path) as entries:
                names = []
                for entry in entries:
                    names.append(entry.name)
                    if len(names) >= MAX_LISTED:
                        break
        except OSError:
            return []
        return sorted(names)

    def glob(self, directory: str, pattern: str) -> list[str]:
        """`directory/name` for the names in `directory` matching `pattern` (one level, no recursion)."""
        prefix = "" if directory == "." else directory.rstrip("/") + "/"
        return [prefix + name for name in self.list_dir(directory) if fnmatch.fnmatch(name, pattern)]
