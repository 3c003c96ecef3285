"""Running git, docker and the operator's proxy commands: argument lists, timeouts, environments from
host_env (none of the service's secrets), output appended to the deployment's log file. Never a shell, except
`build_commands` (the spec's one)."""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.common.deployment_log import DeploymentLog, deployment_log_path
from orchestrator.common.flow_control import FlowAborted, FlowControl

TAIL_LINES = 20
POLL_SECONDS = 0.2  # how soon a cancelled flow's command is killed

__all__ = ["CommandFailed", "DeploymentLog", "deployment_log_path", "kill_group", "run"]


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


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str],
    timeout: float,
    log: DeploymentLog | None,
    shown: Sequence[str] | None = None,
    control: FlowControl | None = None,
    user: tuple[int, int] | None = None,
    stdin: bytes | None = None,
    daemon: bool = False,
) -> str:
    """Run `argv`; return its combined output or raise CommandFailed (FlowAborted when `control` stops the
    flow). `shown` replaces argv in the log. `user` is a (uid, gid) to run as, without supplementary groups.
    `stdin` is written to the command's standard input (a secret that must not be an argument), else it reads
    nothing.

    The command runs in a session of its own, and the whole session's process group is killed when it
    times out, is aborted, or exits leaving children behind, so nothing it started outlives it. `daemon`: the
    command starts a daemon that detaches (forks, the parent exits, the child calls setsid, as nginx does); its
    group is then killed only on a timeout or abort, since a kill after the parent's exit can reach the child
    before its setsid."""
    started = time.monotonic()
    if log:
        log.note("$ " + " ".join(shown or argv))
    try:
        returncode, output = _run_streaming(argv, cwd, env, timeout, log, control, user, stdin, daemon)
    except subprocess.TimeoutExpired as exc:
        output = (exc.output or b"").decode("utf-8", "replace")
        if log:
            log.note(f"timed out after {timeout:.0f}s")
        raise CommandFailed(list(shown or argv), None, output, timed_out=True) from None
    except FlowAborted as exc:
        if log:
            log.note(f"stopped: {exc.message}")
        raise
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
                   log: DeploymentLog | None, control: FlowControl | None,
                   user: tuple[int, int] | None, stdin: bytes | None, daemon: bool) -> tuple[int, str]:
    """Run to the end, appending output to `log` as it arrives (so `logs?follow=true` shows a build live)."""
    if control is not None:
        control.check()
        timeout = min(timeout, max(control.remaining(), 0.0))
    identity: dict[str, object] = {} if user is None else {"user": user[0], "group": user[1], "extra_groups": []}
    process = subprocess.Popen(list(argv), cwd=cwd, env=dict(env),
                               stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                               **identity)  # type: ignore[call-overload]
    assert process.stdout is not None
    if stdin is not None:
        _feed(process, stdin)
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
    deadline = time.monotonic() + timeout
    exited = False
    try:
        while True:
            try:
                returncode = process.wait(timeout=min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0)))
                exited = True
                break
            except subprocess.TimeoutExpired as exc:
                abort = control.aborted() if control is not None else None
                if abort is not None:
                    raise abort from None
                if time.monotonic() >= deadline:
                    exc.output = b"".join(chunks)
                    raise
    finally:
        # The whole session: a build command's `sleep &` or compose's children go with it.
        if not (daemon and exited):
            kill_group(process.pid)
        if process.poll() is None:
            process.wait()
        reader.join(5)
        if not reader.is_alive():
            stdout.close()
        # else a process that left the group (setsid) holds the pipe: its output is not waited for, and the
        # reader thread (a daemon) ends with it; closing the pipe under a blocked read would hang here.
    return returncode, b"".join(chunks).decode("utf-8", "replace")


def _feed(process: subprocess.Popen[bytes], data: bytes) -> None:
    """Write `data` to the command's standard input and close it, in a thread: a command that does not read it
    all must not block this one (its wait and timeout are below)."""
    assert process.stdin is not None
    pipe = process.stdin

    def write() -> None:
        try:
            pipe.write(data)
        except OSError:  # the command exited without reading it all (BrokenPipeError)
            pass
        finally:
            try:
                pipe.close()
            except OSError:
                pass

    threading.Thread(target=write, name="command-input", daemon=True).start()


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
