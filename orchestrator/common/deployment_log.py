"""The per-deployment log file: what every step of a deployment ran and printed, for the operator and the
`logs` endpoint."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.common.naming import preview_segment


@dataclass(frozen=True)
class DeploymentLog:
    """The per-deployment log: every command, its output and exit status, with timestamps."""

    path: Path

    def write(self, text: str) -> None:
        self.append(text if text.endswith("\n") else text + "\n")

    def append(self, text: str) -> None:
        # A full or read-only disk must not turn a deploy into a crash: the step itself will fail and say so.
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Only root reads it (it shows what the build printed); never written through a link.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            # One write: a block (the containers' output) stays whole beside lines another thread appends.
            data = text.encode("utf-8", errors="replace")
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
        except OSError as exc:
            logging.getLogger("orchestrator.deployment_log").warning("deployment log %s not written: %s", self.path,
                                                                exc.strerror)

    def note(self, message: str) -> None:
        self.write(f"[{datetime.now(UTC).isoformat(timespec='seconds')}] {message}")


def deployment_log_path(deployments_dir: Path, slug: str, pr: int) -> Path:
    """Beside the work directory, never inside it: inside, it would enter the Docker build context."""
    return deployments_dir / slug / f"{preview_segment(pr)}.log"
