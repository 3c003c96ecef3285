"""The delivery log: every webhook the service received — accepted, ignored (and why), or refused (and with which
status) — with its time, code host, delivery id, repository, pull request and action; read at `GET /api/deliveries`,
`preview-orchestrator deliveries` and on the dashboard. An accepted delivery keeps its event (never a raw body, never
a refused one's) so `POST /api/deliveries/{id}/replay` can process it again.

SQLite beside the inbox (`deliveries.sqlite3`), not in it: the log is for people, the inbox for the flows, and a
log write must never hold an acknowledgement (it is `synchronous=NORMAL`: a machine crash may lose the last lines,
never an accepted event). Bounded: rows older than DELIVERY_LOG_DAYS go, at most MAX_ROWS are kept, and of the
requests refused before their signature was checked (anyone who reaches the webhook path can send those) only the
newest MAX_UNVERIFIED, so a flood of them never pushes out what the code host sent."""

from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.common.sqlite_file import open_wal
from orchestrator.common.text_table import printable
from orchestrator.state.http_bodies import DeliveryLogEntry
from orchestrator.state.records import PullRequestEvent

MAX_ROWS = 200_000
MAX_UNVERIFIED = 10_000  # of them refused before the signature was checked (401): anyone can send those
PRUNE_EVERY = 1000  # writes between prunes
_TEXT = re.compile(r"[^\w .:#/@()'\"=,+-]")  # what a header value shown to people may keep

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at TEXT NOT NULL,
    codehost    TEXT NOT NULL,
    delivery_id TEXT,
    event       TEXT,
    repository  TEXT,
    pr_number   INTEGER,
    action      TEXT,
    outcome     TEXT NOT NULL,
    status      INTEGER NOT NULL,
    reason      TEXT,
    event_json  TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_of_pull_request ON deliveries (repository, pr_number, id);
CREATE INDEX IF NOT EXISTS deliveries_by_time ON deliveries (received_at);
"""


class DeliveryLogError(Exception):
    """The log file cannot be opened."""


@dataclass(frozen=True)
class Entry:
    """One delivery as received, in what the service made of it."""

    codehost: str
    outcome: str  # DeliveryOutcome
    status: int  # the HTTP status answered
    delivery_id: str | None = None
    event: str | None = None  # the host's event header
    repository: str | None = None  # owner/name as the delivery said, once it was verified
    pr_number: int | None = None
    action: str | None = None
    reason: str | None = None
    replay_of: int | None = None
    kept_event: PullRequestEvent | None = None  # accepted: what a replay processes again


def shown(value: str | None, limit: int = 100) -> str | None:
    """A value from a request's headers as the log keeps it: bounded, without control or markup characters."""
    return _TEXT.sub("?", value[:limit]) if value else None


class DeliveryLog:
    def __init__(self, path: Path, keep_days: float) -> None:
        self.path = path
        self._keep = timedelta(days=keep_days)
        try:
            self._db = open_wal(path, "NORMAL", _SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise DeliveryLogError(f"Delivery log {path} cannot be opened: {exc}") from exc
        self._lock = threading.Lock()
        self._writes = 0
        self.prune()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def record(self, entry: Entry, now: datetime | None = None) -> int:
        """Keep one delivery; returns its id in the log."""
        when = (now or datetime.now(UTC)).isoformat(timespec="milliseconds")
        kept = entry.kept_event.model_dump_json() if entry.kept_event is not None and entry.outcome == "accepted" \
            else None
        reason = entry.reason if entry.replay_of is None else f"replay of delivery {entry.replay_of}" + \
            (f": {entry.reason}" if entry.reason else "")
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO deliveries (received_at, codehost, delivery_id, event, repository, pr_number, action,"
                " outcome, status, reason, event_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (when, entry.codehost, shown(entry.delivery_id), shown(entry.event, 60), entry.repository,
                 entry.pr_number, entry.action, entry.outcome, entry.status, printable(reason or "")[:500] or None,
                 kept))
            self._writes += 1
            if self._writes % PRUNE_EVERY == 1:
                self._prune(now or datetime.now(UTC))
            return int(cursor.lastrowid or 0)

    def prune(self, now: datetime | None = None) -> int:
        with self._lock:
            return self._prune(now or datetime.now(UTC))

    def _cutoff(self, now: datetime) -> str:
        """Entries received before this are gone (pruned now or at the next prune: never shown, never replayed)."""
        return (now - self._keep).isoformat(timespec="milliseconds")

    def _prune(self, now: datetime) -> int:
        cutoff = self._cutoff(now)
        removed = self._db.execute("DELETE FROM deliveries WHERE received_at < ?", (cutoff,)).rowcount
        removed += self._db.execute("DELETE FROM deliveries WHERE id <= (SELECT max(id) FROM deliveries) - ?",
                                    (MAX_ROWS,)).rowcount
        removed += self._db.execute("DELETE FROM deliveries WHERE status = 401 AND id NOT IN (SELECT id FROM "
                                    "deliveries WHERE status = 401 ORDER BY id DESC LIMIT ?)",
                                    (MAX_UNVERIFIED,)).rowcount
        return removed

    def list(self, repository: str | None = None, pr_number: int | None = None, codehost: str | None = None,
             limit: int = 100) -> list[DeliveryLogEntry]:
        """The newest first; `repository` (owner/name) matched case-insensitively."""
        where, params = ["received_at >= ?"], [self._cutoff(datetime.now(UTC))]
        if repository is not None:
            where.append("lower(repository) = ?")
            params.append(repository.lower())
        if pr_number is not None:
            where.append("pr_number = ?")
            params.append(pr_number)
        if codehost is not None:
            where.append("codehost = ?")
            params.append(codehost)
        clause = f"WHERE {' AND '.join(where)}"
        with self._lock:
            # The clause is made of this method's own fixed conditions; the values are parameters.
            query = ("SELECT id, received_at, codehost, delivery_id, event, repository, pr_number, action, outcome,"  # noqa: S608
                     f" status, reason, event_json IS NOT NULL FROM deliveries {clause} ORDER BY id DESC LIMIT ?")
            rows = self._db.execute(query, [*params, limit]).fetchall()
        return [_entry(row[:11], bool(row[11])) for row in rows]

    def kept_event(self, entry_id: int) -> tuple[DeliveryLogEntry, PullRequestEvent | None] | None:
        """An entry and the event it keeps (None: not accepted, or not kept); None when there is no such entry."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, received_at, codehost, delivery_id, event, repository, pr_number, action, outcome, status,"
                " reason, event_json FROM deliveries WHERE id = ? AND received_at >= ?",
                (entry_id, self._cutoff(datetime.now(UTC)))).fetchone()
        if row is None:
            return None
        event = PullRequestEvent.model_validate_json(row[11]) if row[11] else None
        return _entry(row[:11], event is not None), event


def _entry(row: tuple[object, ...], replayable: bool) -> DeliveryLogEntry:
    names = ("id", "receivedAt", "codehost", "deliveryId", "event", "repository", "prNumber", "action", "outcome",
             "status", "reason")
    return DeliveryLogEntry.model_validate({**dict(zip(names, row, strict=True)), "replayable": replayable})
