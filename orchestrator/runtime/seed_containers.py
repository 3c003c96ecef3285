"""A seed's container, as database_seeds.py (an empty seed) and data_seeds.py (a restored dump) run one: the
bounds it runs with, its labels, the wait for the database to be ready and the lines of its output that say what
failed."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from orchestrator.plugin_api import CommandFailed

READY_PAUSE = 0.2
# A restore is the service's work for one repository: more than a preview's half core, still bounded.
BOUNDS = ["--cpus", "1", "--memory", "1g", "--pids-limit", "1024", "--cap-drop", "NET_RAW",
          "--security-opt", "no-new-privileges", "--log-driver", "json-file", "--log-opt", "max-size=10m"]
ERROR_WORDS = re.compile(r"\b(ERROR|FATAL|PANIC|error)\b[:\s]")
MAX_ERROR_LINES = 10


def await_ready(docker: Callable[..., str], name: str, ready: list[str], timeout: float,
                pause: Callable[[float], None]) -> str | None:
    """Run `ready` in the seed's container `name` until it succeeds (None), pausing READY_PAUSE between tries; else
    why it never will: `exited with code N` (the container stopped) or `not ready after Ns`."""
    started = time.monotonic()
    while True:
        try:
            docker(["exec", name, *ready], timeout=30)
            return None
        except CommandFailed:
            state = json.loads(docker(["container", "inspect", "--format", "{{json .State}}", name]))
            if state.get("Status") != "running":
                return f"exited with code {state.get('ExitCode')}"
            if time.monotonic() - started > timeout:
                return f"not ready after {timeout:.0f}s"
        pause(READY_PAUSE)


def label_args(labels: dict[str, str]) -> list[str]:
    return [arg for pair in labels.items() for arg in ("--label", "=".join(pair))]


def error_lines(output: str) -> list[str]:
    """The lines of a database tool's output that say what failed, from the error word on (psql prefixes its own
    `psql:FILE:LINE: `), at most MAX_ERROR_LINES."""
    found = []
    for line in output.splitlines():
        if match := ERROR_WORDS.search(line):
            found.append(line[match.start():].strip()[:300])
    return found[:MAX_ERROR_LINES]
