"""The suite's own Docker engine (scripts/test-engine): the engine tests run against it, inside its network
namespace, and never against the machine's default engine — a contributor's containers, images and build cache."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test-engine"
HOW = "run them through scripts/test, or scripts/test-engine exec pytest … (as root)"


ENGINE_VARIABLES = ("DOCKER_HOST", "PO_TEST_NETNS", "PO_TEST_ENGINE_PIDFILE", "PO_TEST_ENGINE_LOG")


def engine_env() -> dict[str, str]:
    """What a process a test starts with an environment of its own (the service, the CLI, `docker login`) needs
    to reach the suite's engine and not the machine's."""
    return {name: os.environ[name] for name in ENGINE_VARIABLES if os.environ.get(name)}


def engine_problem() -> str | None:
    """Why the engine tests cannot run here, or None: DOCKER_HOST must name the suite's engine and this process
    must be in its network namespace (where the service, nginx and the containers' ports listen)."""
    netns = os.environ.get("PO_TEST_NETNS", "")
    if not netns or not os.environ.get("DOCKER_HOST", "").startswith("unix:///run/po-test-"):
        return f"the engine tests use the suite's own Docker engine, never the machine's: {HOW}"
    try:
        here, there = os.stat("/proc/self/ns/net"), os.stat(f"/run/netns/{netns}")
    except OSError:
        return f"the suite's network namespace {netns} is gone: {HOW}"
    if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
        return f"the engine tests run inside the network namespace {netns}: {HOW}"
    return None


def engine_pid() -> int:
    return int(Path(os.environ["PO_TEST_ENGINE_PIDFILE"]).read_text().strip())


def stop_engine() -> None:
    """SIGTERM to the suite's engine, as an operator's `systemctl stop docker` would send (its pidfile names it)."""
    os.kill(engine_pid(), signal.SIGTERM)


def start_engine() -> None:
    """The suite's engine started again: scripts/test-engine start returns once it answers, and fails otherwise."""
    subprocess.run([str(SCRIPT), "start"], check=True, timeout=180, capture_output=True)
