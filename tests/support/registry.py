"""Debian's docker-registry as a plain process: tag deletion on, htpasswd authentication (bcrypt, the only kind
it reads) when credentials are given. The swarm's registry, the operator's private registry of the first-hour
test, and the doctor's access check all use it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from tests.support import web


def start_registry(root: Path, address: str, credentials: tuple[str, str] | None,
                   log_level: str = "warn") -> subprocess.Popen[bytes]:
    """Serve `root/data` at `address` (host:port) with `root/config.yml`; returns once it answers."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    auth = ""
    if credentials is not None:
        htpasswd = subprocess.run(["htpasswd", "-Bbn", *credentials], capture_output=True, text=True, check=True,
                                  timeout=60).stdout
        (root / "htpasswd").write_text(htpasswd)
        auth = f"auth:\n  htpasswd:\n    realm: preview-test\n    path: {root / 'htpasswd'}\n"
    (root / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: {log_level}\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"  delete:\n    enabled: true\n{auth}http:\n  addr: {address}\n")
    log = (root / "registry.log").open("ab")
    process = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")], stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while not _answers(f"http://{address}/v2/"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.terminate()
            raise RuntimeError(f"docker-registry did not start at {address}: {root / 'registry.log'}")
        time.sleep(0.1)
    return process


def stop_registry(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(30)


def _answers(url: str) -> bool:
    try:
        return web.get(url, timeout=2).status_code in (200, 401)
    except httpx.HTTPError:
        return False
