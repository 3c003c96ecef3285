"""Polling the preview's health path until it answers 2xx or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from orchestrator.commands import DeploymentLog


def wait_healthy(url: str, interval: float, timeout: float, log: DeploymentLog,
                 sleep: Callable[[float], None] = time.sleep) -> bool:
    """Probe at once, then every `interval` seconds up to `timeout`; any 2xx is healthy."""
    deadline = time.monotonic() + timeout
    attempt = 0
    with httpx.Client(timeout=min(interval, 10.0) + 1.0, follow_redirects=False) as client:
        while True:
            attempt += 1
            try:
                status = client.get(url).status_code
                log.note(f"health probe {attempt}: {url} -> {status}")
                if 200 <= status < 300:
                    return True
            except httpx.HTTPError as exc:
                log.note(f"health probe {attempt}: {url} -> {type(exc).__name__}")
            if time.monotonic() + interval > deadline:
                return False
            sleep(interval)
