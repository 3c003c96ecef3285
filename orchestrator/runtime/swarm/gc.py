"""The registry's garbage collection (SWARM_REGISTRY_GC_COMMAND, every SWARM_REGISTRY_GC_INTERVAL_SECONDS).

A preview's tags are deleted when it closes (removal.py), but the registry frees their layers only when its
garbage collection runs: a command on the registry's own host (`docker-registry garbage-collect
CONFIG` for Debian's registry), which the operator names and the service runs as an argument list, no shell.
Collection must not meet an upload (a layer pushed before its manifest would look unreferenced), and the service is
the registry's only writer: pushes share the PushGate, a collection holds it alone — it waits for the pushes
under way, and pushes that come meanwhile wait for it.

Each run is written to STATE_DIR/registry-gc.json; `doctor` shows when it last ran and how it went. The service
looks often and runs it once the last run is an interval old (`due`), so restarts do not put it off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from orchestrator.plugin_api import CommandFailed, DeploymentLog, FlowControl, HostEnv, run_command

GC_FILE = "registry-gc.json"
GC_TIMEOUT = 3600.0


class GcRun(BaseModel):
    at: datetime
    ok: bool
    seconds: float
    detail: str = ""  # the command's last lines when it failed


class PushGate:
    """Shared by pushes, held alone by a collection; a waiting collection goes before pushes that come later."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._pushes = 0
        self._collecting = False
        self._wanted = False

    @contextmanager
    def pushing(self, control: FlowControl | None = None, log: DeploymentLog | None = None) -> Iterator[None]:
        """Held while a push runs; waits while a collection runs or waits, and that wait can be stopped
        (`control`: a close, a newer push, the flow's deadline), saying why in the deployment log."""
        with self._lock:
            said = False
            while not self._lock.wait_for(lambda: not self._collecting and not self._wanted, timeout=0.5):
                if log is not None and not said:
                    log.note("waiting for the registry's garbage collection to finish before pushing")
                    said = True
                if control is not None:
                    control.check()
            self._pushes += 1
        try:
            yield
        finally:
            with self._lock:
                self._pushes -= 1
                self._lock.notify_all()

    @contextmanager
    def collecting(self) -> Iterator[None]:
        with self._lock:
            self._wanted = True
            self._lock.wait_for(lambda: self._pushes == 0 and not self._collecting)
            self._wanted, self._collecting = False, True
        try:
            yield
        finally:
            with self._lock:
                self._collecting = False
                self._lock.notify_all()


def due(state_dir: Path, interval: float, now: datetime | None = None) -> bool:
    """Whether the last run is `interval` seconds old (or there is none): the schedule survives restarts."""
    run = last_run(state_dir)
    return run is None or ((now or datetime.now(UTC)) - run.at).total_seconds() >= interval


def collect(argv: list[str], state_dir: Path, gate: PushGate, env: HostEnv) -> GcRun:
    """Run the collection once, while no push runs; the run is recorded whatever its outcome."""
    with gate.collecting():
        started = time.monotonic()
        try:
            run_command(argv, cwd=None, env=env.docker(), timeout=GC_TIMEOUT, log=None)
            result = GcRun(at=datetime.now(UTC), ok=True, seconds=time.monotonic() - started)
        except CommandFailed as exc:  # also a command that is not there
            result = GcRun(at=datetime.now(UTC), ok=False, seconds=time.monotonic() - started,
                           detail=exc.tail(3) or str(exc))
    path = state_dir / GC_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(result.model_dump_json(), encoding="utf-8")
    scratch.replace(path)
    return result


def last_run(state_dir: Path) -> GcRun | None:
    try:
        return GcRun.model_validate_json((state_dir / GC_FILE).read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None
