"""The service's own SQLite files (the inbox, the delivery log): one connection shared by threads behind the
caller's lock, autocommit (a `Transaction` where the caller needs one), write-ahead logging."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Literal


def open_wal(path: Path, synchronous: Literal["FULL", "NORMAL"], schema: str) -> sqlite3.Connection:
    """`path` opened (its directory made), in WAL mode with `synchronous`, and `schema` applied. OSError or
    sqlite3.Error when it cannot be; the caller says which file it is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.executescript(schema)
    return db


class Transaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on an exception), a SQLite or disk error raised as `error(exc)`."""

    def __init__(self, db: sqlite3.Connection, error: Callable[[sqlite3.Error], Exception]) -> None:
        self._db = db
        self._error = error

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.Error as commit_error:
                self._db.execute("ROLLBACK")
                raise self._error(commit_error) from None
        self._db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise self._error(exc) from exc
