"""Polling the preview's health path until it answers 200 or the time is up (the spec: every 5 seconds, up to
60 seconds; the last probe is at the 60th second)."""

from __future__ import annotations

import time

import httpx

from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.common.flow_control import FlowControl


def wait_healthy(url: str, interval: float, timeout: float, log: DeploymentLog, control: FlowControl) -> bool:
    """Probe at once, then every `interval` seconds, and once more when `timeout` is reached; only 200 is
    healthy (a redirect or a 204 from a catch-all is not the app answering its health path)."""
    started = time.monotonic()
    attempt = 0
    with httpx.Client(timeout=min(interval, 10.0) + 1.0, follow_redirects=False) as client:
        while True:
            control.check()
            attempt += 1
            try:
                status = client.get(url).status_code
                log.note(f"health probe {attempt}: {url} -> {status}")
                if status == 200:
                    return True
            except httpx.HTTPError as exc:
                log.note(f"health probe {attempt}: {url} -> {type(exc).__name__}")
            elapsed = time.monotonic() - started
            if elapsed >= timeout:
                return False
            # The next probe at the next multiple of `interval`, the last one exactly at `timeout`.
            control.wait(min(interval * attempt, timeout) - elapsed)
