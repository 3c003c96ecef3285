"""The durable event inbox: accepted webhook events, kept until their flow has finished.

SQLite from the standard library, not a hand-written journal: one transaction gives us the durable write
before the 200, the unique delivery id, and the supersede/cancel rules atomically; WAL with
`synchronous=FULL` for accepted events survives `kill -9` and power loss, and there is nothing to compact
by hand.

An event moves `pending` → `running` → `done` | `failed`; a pending event can instead end `superseded`
(a newer synchronize for the same pull request arrived) or `cancelled` (the pull request was closed).
On start-up, events left `running` by a crash go back to `pending`, so every acknowledged event is
processed; flows are written to be safe to run again.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.common.sqlite_file import Transaction, open_wal
from orchestrator.state.records import DeploymentTaken, PullRequestEvent

FINISHED = ("done", "failed", "superseded", "cancelled")
KEEP_FINISHED = timedelta(days=7)  # long enough to recognise a redelivery from the code host's UI

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id   TEXT NOT NULL UNIQUE,
    deployment_id TEXT NOT NULL,
    action        TEXT NOT NULL,
    event_json    TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending',
    error         TEXT,
    received_at   TEXT NOT NULL,
    finished_at   TEXT
);
CREATE INDEX IF NOT EXISTS events_open ON events (status, deployment_id, seq);
-- The newest `updated_at` of a pull request among the events accepted for it, kept after its preview is gone:
-- a replayed `opened` of a closed pull request is as stale as a replayed `synchronize`.
CREATE TABLE IF NOT EXISTS pull_request_clock (
    repository TEXT NOT NULL,
    pr_number  INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    last_event TEXT NOT NULL DEFAULT '',  -- action and head of the newest event: the same again is a replay
    PRIMARY KEY (repository, pr_number)
);
"""


class InboxError(Exception):
    """The inbox file cannot be opened or written."""


@dataclass(frozen=True)
class Accepted:
    seq: int
    duplicate: bool
    stale: bool = False  # older than an event already accepted for the pull request: not stored (seq 0)
    busy: bool = False  # accept(only_if_idle=True) and the deployment has an event to run: not stored (seq 0)

    @property
    def stored(self) -> bool:
        return self.seq > 0 and not self.duplicate


@dataclass(frozen=True)
class Seen:
    """The newest event accepted for a pull request: its `updated_at` (UTC text), action and head commit."""

    updated_at: str
    action: str
    sha: str


@dataclass(frozen=True)
class Claimed:
    seq: int
    event: PullRequestEvent


@dataclass(frozen=True)
class Outcome:
    status: str
    error: str | None


class Inbox:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = open_wal(path, "FULL", _SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(pull_request_clock)")}
            if "last_event" not in columns:  # a clock kept before the newest event was remembered
                self._db.execute("ALTER TABLE pull_request_clock ADD COLUMN last_event TEXT NOT NULL DEFAULT ''")
        except (OSError, sqlite3.Error) as exc:
            raise InboxError(f"Event inbox {path} cannot be opened: {exc}") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def accept(self, event: PullRequestEvent, only_if_idle: bool = False) -> Accepted:
        """Store `event` durably; a delivery id seen before is reported as a duplicate, and an event whose pull
        request's `updated_at` is older than that of one already accepted for it as stale; neither is stored.
        `only_if_idle`: stored only when the deployment has no event to run, checked in the same transaction (the
        service's own retries must not cancel, nor follow, what a webhook just queued)."""
        with self._lock, self._transaction():
            row = self._db.execute(
                "SELECT seq FROM events WHERE delivery_id = ?", (event.delivery_id,)
            ).fetchone()
            if row:
                return Accepted(seq=row[0], duplicate=True)
            if only_if_idle and self._db.execute(
                    "SELECT 1 FROM events WHERE deployment_id = ? AND status IN ('pending', 'running') LIMIT 1",
                    (event.deployment_id,)).fetchone():
                return Accepted(seq=0, duplicate=False, busy=True)
            self._check_owner(event)
            if self._stale(event):
                return Accepted(seq=0, duplicate=False, stale=True)
            if event.action == "synchronize":
                self._finish_pending(event.deployment_id, ("synchronize",), "superseded")
            elif event.action == "closed":
                self._finish_pending(event.deployment_id, None, "cancelled")
            cursor = self._db.execute(
                "INSERT INTO events (delivery_id, deployment_id, action, event_json, received_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    event.delivery_id,
                    event.deployment_id,
                    event.action,
                    event.model_dump_json(),
                    event.received_at.isoformat(),
                ),
            )
            return Accepted(seq=int(cursor.lastrowid or 0), duplicate=False)

    def claim_next(self, busy_deployments: Iterable[str],
                   actions: Iterable[str] | None = None) -> Claimed | None:
        """Mark the oldest pending event of a deployment that is not busy (and, if given, of one of `actions`)
        as running and return it."""
        busy = list(busy_deployments)
        wanted = list(actions or ())
        exclude = f"AND deployment_id NOT IN ({','.join('?' * len(busy))})" if busy else ""
        only = f"AND action IN ({','.join('?' * len(wanted))})" if wanted else ""
        with self._lock, self._transaction(durable=False):
            row = self._db.execute(
                f"SELECT seq, event_json FROM events WHERE status = 'pending' {exclude} {only} "  # noqa: S608
                "ORDER BY seq LIMIT 1",
                [*busy, *wanted],
            ).fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE events SET status = 'running' WHERE seq = ?", (row[0],))
        return Claimed(seq=row[0], event=PullRequestEvent.model_validate_json(row[1]))

    def finish(self, seq: int, error: str | None) -> None:
        status = "failed" if error else "done"
        with self._lock, self._transaction(durable=False):
            self._db.execute(
                "UPDATE events SET status = ?, error = ?, finished_at = ? WHERE seq = ?",
                (status, error, _now(), seq),
            )

    def outcome(self, seq: int) -> Outcome | None:
        """The final outcome of an event, or None while it is pending or running."""
        with self._lock:
            row = self._db.execute("SELECT status, error FROM events WHERE seq = ?", (seq,)).fetchone()
        if row is None or row[0] not in FINISHED:
            return None
        return Outcome(status=row[0], error=row[1])

    def requeue_interrupted(self) -> int:
        """Put events a crash left `running` back in line; returns how many."""
        with self._lock, self._transaction():
            cursor = self._db.execute("UPDATE events SET status = 'pending' WHERE status = 'running'")
            return cursor.rowcount

    def prune(self, now: datetime | None = None) -> int:
        cutoff = ((now or datetime.now(UTC)) - KEEP_FINISHED).isoformat()
        with self._lock, self._transaction():
            cursor = self._db.execute(
                f"DELETE FROM events WHERE status IN ({','.join('?' * len(FINISHED))})"  # noqa: S608
                " AND finished_at < ?",
                (*FINISHED, cutoff),
            )
            return cursor.rowcount

    def open_deployments(self) -> set[str]:
        """Deployments with an event still to run (pending, or running when the service stopped)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT deployment_id FROM events WHERE status IN ('pending', 'running')"
            ).fetchall()
        return {row[0] for row in rows}

    def depth(self) -> int:
        """Events accepted and not finished yet (pending or running)."""
        with self._lock:
            row = self._db.execute(
                "SELECT count(*) FROM events WHERE status IN ('pending', 'running')"
            ).fetchone()
        return int(row[0])

    def last_seen(self, repository: str, pr_number: int) -> Seen | None:
        """What the service last heard of a pull request (kept after its preview is gone), or None: never."""
        with self._lock:
            row = self._db.execute("SELECT updated_at, last_event FROM pull_request_clock WHERE repository = ? AND "
                                   "pr_number = ?", (repository, pr_number)).fetchone()
        if row is None:
            return None
        action, _, sha = str(row[1]).partition(" ")
        return Seen(updated_at=row[0], action=action, sha=sha)

    def _check_owner(self, event: PullRequestEvent) -> None:
        """Refuse an event whose deployment id has open work of another repository (checked in the same
        transaction as the insert, so no event of the other repository can be superseded or cancelled)."""
        rows = self._db.execute(
            "SELECT event_json FROM events WHERE deployment_id = ? AND status IN ('pending', 'running')",
            (event.deployment_id,),
        ).fetchall()
        for (event_json,) in rows:
            other = PullRequestEvent.model_validate_json(event_json)
            if other.repository != event.repository:
                raise DeploymentTaken(other.repo_owner, other.repo_name, event.deployment_id)

    def _stale(self, event: PullRequestEvent) -> bool:
        """Whether the pull request has changed since `event` was sent, or `event` repeats the newest one (same
        time, action and head: a replay under another delivery id). An event that says nothing of when is never
        stale. Otherwise its time becomes the pull request's, in the same transaction as the insert. Two events of
        one second (the code host's clock) that differ are both acted on."""
        if event.pr_updated_at is None:
            return False
        when = event.pr_updated_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        what = f"{event.action} {event.commit_sha or ''}"
        row = self._db.execute("SELECT updated_at, last_event FROM pull_request_clock WHERE repository = ? AND "
                               "pr_number = ?", (event.repository, event.pr_number)).fetchone()
        # UTC, one fixed format: text order is time order
        if row is not None and (row[0] > when or (row[0] == when and row[1] == what)):
            return True
        self._db.execute("INSERT INTO pull_request_clock (repository, pr_number, updated_at, last_event) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT (repository, pr_number) DO UPDATE SET "
                         "updated_at = excluded.updated_at, last_event = excluded.last_event",
                         (event.repository, event.pr_number, when, what))
        return False

    def _finish_pending(self, deployment_id: str, actions: tuple[str, ...] | None, status: str) -> None:
        query = "UPDATE events SET status = ?, finished_at = ? WHERE status = 'pending' AND deployment_id = ?"
        params: list[str] = [status, _now(), deployment_id]
        if actions:
            query += f" AND action IN ({','.join('?' * len(actions))})"
            params.extend(actions)
        self._db.execute(query, params)

    def _transaction(self, durable: bool = True) -> Transaction:
        # A commit that acknowledges a webhook is fsynced before the 200. Claiming and finishing are not
        # (WAL, synchronous=NORMAL: safe against a crash of the service, not of the machine): lost on power
        # loss, they only make an event run again, which flows allow. That halves the fsyncs per event.
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        return Transaction(self._db, lambda exc: InboxError(f"Event inbox {self.path} cannot be written: {exc}"))


def _now() -> str:
    return datetime.now(UTC).isoformat()
