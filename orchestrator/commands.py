"""Running git, docker and the operator's proxy commands: argument lists, timeouts, clean environments,
output appended to the deployment's log file. Never a shell, except `build_commands` (the spec's one)."""

from __future__ import annotations

import codecs
import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

TAIL_LINES = 20


class CommandFailed(Exception):
    def __init__(self, argv: Sequence[str], returncode: int | None, output: str, timed_out: bool = False) -> None:
        what = "timed out" if timed_out else f"exited with {returncode}"
        super().__init__(f"{argv[0]} {what}")
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output
        self.timed_out = timed_out

    def tail(self, lines: int = TAIL_LINES) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


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
            with self.path.open("a", encoding="utf-8", errors="replace") as handle:
                handle.write(text)
        except OSError as exc:
            logging.getLogger("orchestrator.commands").warning("deployment log %s not written: %s", self.path,
                                                                exc.strerror)

    def note(self, message: str) -> None:
        self.write(f"[{datetime.now(UTC).isoformat(timespec='seconds')}] {message}")


def deployment_log_path(deployments_dir: Path, slug: str, pr: int) -> Path:
    """Beside the work directory, never inside it: inside, it would enter the Docker build context."""
    return deployments_dir / slug / f"pr-{pr}.log"


def clean_env(extra: Mapping[str, str] | None = None, home: Path | None = None) -> dict[str, str]:
    """PATH, HOME and locale only — nothing of the service's own environment (its secrets) leaks."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home or Path("/nonexistent")),
        "LANG": "C.UTF-8",
    }
    if "DOCKER_HOST" in os.environ:  # where the engine is; not a secret, and compose needs it
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    env.update(extra or {})
    return env


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str],
    timeout: float,
    log: DeploymentLog | None,
    shown: Sequence[str] | None = None,
) -> str:
    """Run `argv`; return its combined output or raise CommandFailed. `shown` replaces argv in the log."""
    started = time.monotonic()
    if log:
        log.note("$ " + " ".join(shown or argv))
    try:
        returncode, output = _run_streaming(argv, cwd, env, timeout, log)
    except subprocess.TimeoutExpired as exc:
        output = (exc.output or b"").decode("utf-8", "replace")
        if log:
            log.note(f"timed out after {timeout:.0f}s")
        raise CommandFailed(list(shown or argv), None, output, timed_out=True) from None
    except OSError as exc:
        if log:
            log.note(f"could not start: {exc.strerror}")
        raise CommandFailed(list(shown or argv), None, str(exc)) from None
    if log:
        if output and not output.endswith("\n"):
            log.append("\n")
        log.note(f"exit {returncode} after {time.monotonic() - started:.1f}s")
    if returncode != 0:
        raise CommandFailed(list(shown or argv), returncode, output)
    return output


def _run_streaming(argv: Sequence[str], cwd: Path | None, env: Mapping[str, str], timeout: float,
                   log: DeploymentLog | None) -> tuple[int, str]:
    """Run to the end, appending output to `log` as it arrives (so `logs?follow=true` shows a build live)."""
    process = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    stdout = process.stdout
    chunks: list[bytes] = []
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character may straddle two reads

    def pump() -> None:
        while chunk := stdout.read1(65536):
            chunks.append(chunk)
            if log:
                log.append(decoder.decode(chunk))

    reader = threading.Thread(target=pump, name="command-output", daemon=True)
    reader.start()
    try:
        returncode = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        process.wait()
        reader.join(5)  # a grandchild may hold the pipe open; its output is not waited for
        exc.output = b"".join(chunks)
        raise
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(5)
    stdout.close()
    return returncode, b"".join(chunks).decode("utf-8", "replace")
