"""Commands never outlive what started them: whole process groups die on timeout, on cancellation and at the
end; a flow's deadline and cancellation stop it promptly; a restart finds what a killed service left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.adapters.leftovers import marked_processes, stop_marked_processes
from orchestrator.common.commands import CommandFailed, DeploymentLog, run
from orchestrator.common.flow_control import FlowAborted, FlowControl
from orchestrator.common.host_env import CHILD_MARKER, HostEnv
from tests.support.live import wait_until

ENV = {"PATH": "/usr/bin:/bin"}
# The fraction of every `sleep` these tests start: its processes are told apart from any other `sleep 40x` on the
# host (another test run, a contributor's shell), which the process listing below would otherwise count.
TAG = f"{os.getpid()}{time.time_ns() % 10**6:06d}"


def running(pattern: str) -> list[str]:
    lines = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout.splitlines()
    return [line for line in lines if pattern in line and "ps -eo" not in line]


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed) as failed:
        run(["sh", "-c", f"sleep 401.{TAG} & sleep 402.{TAG}"], cwd=None, env=ENV, timeout=1,
            log=DeploymentLog(tmp_path / "l"))
    assert failed.value.timed_out
    wait_until(lambda: not running(f".{TAG}"), timeout=5, message="both sleeps gone")


def test_children_left_behind_by_a_command_that_exits_are_killed(tmp_path: Path) -> None:
    run(["sh", "-c", f"sleep 403.{TAG} & echo started"], cwd=None, env=ENV, timeout=10, log=None)
    wait_until(lambda: not running(f"sleep 403.{TAG}"), timeout=5, message="background child gone")


# A daemon's start as nginx does it: fork, the parent exits at once, the child calls setsid a moment later and
# then writes its pid file. The moment is stretched here so that the group kill, if any, lands inside it.
DAEMON = """import os, sys, time
if os.fork():
    sys.exit(0)
time.sleep(0.5)
os.setsid()
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(30)
"""


@pytest.mark.parametrize("daemon", [False, True])
def test_a_daemon_that_detaches_after_its_parent_exits_survives_only_when_asked(tmp_path: Path,
                                                                                daemon: bool) -> None:
    pid_file = tmp_path / "pid"
    run([sys.executable, "-c", DAEMON, str(pid_file)], cwd=None, env=ENV, timeout=10, log=None, daemon=daemon)
    time.sleep(1.5)
    if not daemon:  # the default: the child is killed with the group before its setsid
        assert not pid_file.exists()
        return
    wait_until(pid_file.exists, timeout=5, message="the daemon wrote its pid file")
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)  # still running
    finally:
        os.kill(pid, signal.SIGKILL)


def test_cancellation_stops_a_running_command_at_once(tmp_path: Path) -> None:
    control = FlowControl(timeout=600)
    threading.Timer(0.5, control.cancel, args=("the pull request was closed",)).start()
    started = time.monotonic()
    with pytest.raises(FlowAborted) as aborted:
        run(["sh", "-c", f"sleep 404.{TAG} & sleep 405.{TAG}"], cwd=None, env=ENV, timeout=600, log=None,
            control=control)
    assert time.monotonic() - started < 3
    assert aborted.value.cancelled and aborted.value.message == "Cancelled: the pull request was closed"
    wait_until(lambda: not running(f".{TAG}"), timeout=5, message="sleeps gone")


def test_the_flow_deadline_bounds_every_command_and_wait() -> None:
    control = FlowControl(timeout=1.0)
    started = time.monotonic()
    with pytest.raises(FlowAborted) as aborted:
        run(["sleep", "406"], cwd=None, env=ENV, timeout=600, log=None, control=control)
    assert 0.9 < time.monotonic() - started < 3
    assert not aborted.value.cancelled and "FLOW_TIMEOUT_SECONDS" in aborted.value.message
    with pytest.raises(FlowAborted):
        run(["true"], cwd=None, env=ENV, timeout=10, log=None, control=control)  # no new command after it
    waited = time.monotonic()
    control.wait(30)
    assert time.monotonic() - waited < 0.5


def test_a_restart_finds_and_stops_what_a_killed_service_left_running(tmp_path: Path) -> None:
    """A stand-in for a killed service: a process that started marked children and was SIGKILLed."""
    env = HostEnv.for_state_dir(tmp_path / "state", inherited=ENV)
    other = HostEnv.for_state_dir(tmp_path / "other-state", inherited=ENV)
    script = ("import subprocess, time\n"
              f"subprocess.Popen(['sh', '-c', 'sleep 407.{TAG} & sleep 408.{TAG}'], start_new_session=True)\n"
              "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], env=env.commands(tmp_path))
    unrelated = subprocess.Popen(["sleep", "409"], env=other.commands(tmp_path))
    try:
        wait_until(lambda: len(marked_processes(env.marker)) >= 3, timeout=10, message="children started")
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        assert len(marked_processes(env.marker)) >= 2  # the orphans keep running
        stopped = stop_marked_processes(env.marker)
        assert stopped
        assert marked_processes(env.marker) == []
        assert not running(f"sleep 407.{TAG}") and not running(f"sleep 408.{TAG}")
        assert unrelated.poll() is None  # another service's child is not ours to stop
    finally:
        unrelated.kill()
        unrelated.wait(5)
    assert f"{CHILD_MARKER}={env.marker}" in "\0".join(f"{k}={v}" for k, v in env.docker().items())
    assert str(os.getpid()) not in map(str, marked_processes(env.marker))


def test_a_process_that_leaves_the_group_does_not_hold_the_flow(tmp_path: Path) -> None:
    """`setsid` escapes the group kill; it keeps the output pipe open, and the command still returns."""
    started = time.monotonic()
    try:
        output = run(["sh", "-c", f"setsid sleep 410.{TAG} & echo started"], cwd=None, env=ENV, timeout=30, log=None)
        assert "started" in output
        assert time.monotonic() - started < 10
    finally:
        subprocess.run(["pkill", "-x", "-f", f"sleep 410.{TAG}"], timeout=10)  # this run's, never another's
