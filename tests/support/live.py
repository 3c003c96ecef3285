"""A real `preview-orchestrator serve` process (uvicorn) for tests that talk over a socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import web
from tests.support.payloads import FIXTURE_REPO, REPO_ROOT, SECRET
from tests.support.test_engine import engine_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServiceProcess:
    def __init__(self, workdir: Path, port: int | None = None, drop: tuple[str, ...] = (), **env: str) -> None:
        """`drop`: variables the service must not get at all (`env` adds or replaces)."""
        self.workdir = workdir
        self.port = port or free_port()
        self.drop = drop
        self.extra_env = dict(env)  # to start the same service again
        self.log_path = workdir / "service.log"  # standard error: the JSON log lines
        self.out_path = workdir / "service.out"  # standard output: what `serve` tells its user
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(workdir),
            "PYTHONPATH": str(REPO_ROOT),
            "CODEHOST_WEBHOOK_SECRET": SECRET,
            "CODEHOST_TOKEN": "live-test-token-8d2e",
            "ALLOWED_REPOS": FIXTURE_REPO,
            "ORCHESTRATOR_PORT": str(self.port),
            "DEPLOYMENTS_DB": str(workdir / "state" / "deployments.json"),
            "DEPLOYMENTS_DIR": str(workdir / "deployments"),
            "PROXY_CONFIG_DIR": str(workdir / "proxy"),
            "LOG_LEVEL": "debug",
            # Start-up asks the code host for its rate limit: a closed local port, never the internet.
            "CODEHOST_API_URL": "http://127.0.0.1:9",
            "RECONCILE_INTERVAL_MINUTES": "0",  # on where a test asks for it (tests/test_reconcile_e2e.py)
            **engine_env(),  # the suite's own engine (a test may name another: **env)
            **env,
        }
        for name in drop:
            self.env.pop(name, None)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServiceProcess:
        log, out = self.log_path.open("ab"), self.out_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve"],
            cwd=self.workdir, env=self.env, stdout=out, stderr=log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"service exited early:\n{self.log_path.read_text()}{self.out_path.read_text()}")
            try:
                if web.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError(f"service did not answer in {timeout}s:\n{self.log_path.read_text()}")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(condition, timeout: float = 30.0, message: str = "condition",  # noqa: ANN001
               pause: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(pause)
    raise AssertionError(f"{message} not met within {timeout}s")
