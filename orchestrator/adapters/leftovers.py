"""After a crash: stop what the previous run of this service left running, before any event runs again.

Every child the service starts carries its state directory's marker in its environment (host_env), and
inherits it to its own children, so the processes of a killed service's git, compose and build commands are
found in /proc; the containers of `build_commands` carry the same marker as a label.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from orchestrator.common.host_env import CHILD_MARKER

log = logging.getLogger("orchestrator.adapters.leftovers")


def marked_processes(marker: str, proc: Path = Path("/proc")) -> list[int]:
    """Processes whose environment carries `marker` (never this process)."""
    needle = f"{CHILD_MARKER}={marker}".encode() + b"\0"
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes() + b"\0"
        except OSError:  # gone, or a kernel thread
            continue
        if needle in environ:
            found.append(int(entry.name))
    return sorted(found)


def stop_marked_processes(marker: str, wait_seconds: float = 5.0) -> list[int]:
    """SIGKILL every process (and its process group) left by an earlier run with `marker`; returns them."""
    found = marked_processes(marker)
    own_group = os.getpgrp()
    for pid in found:
        try:
            group = os.getpgid(pid)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + wait_seconds
    while found and time.monotonic() < deadline and any(_alive(pid) for pid in found):
        time.sleep(0.05)
    if found:
        log.warning("stopped %d process(es) left running by the previous run: %s", len(found),
                    ", ".join(map(str, found)))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
