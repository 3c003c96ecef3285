"""The service's own SQLite files (the inbox, the delivery log): one connection shared by threads behind the
caller's lock, autocommit (the caller's BEGIN IMMEDIATE where it needs a transaction), write-ahead logging."""

from __future__ import annotations

import sqlite3
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
