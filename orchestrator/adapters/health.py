"""Polling the preview's health path until it answers 200 or the time is up (the spec: every 5 seconds, up to
60 seconds; the last probe is at the 60th second), while watching that its containers still run."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.tls import shared_context

WATCH_SECONDS = 1.0  # between probes, the containers are looked at this often
FIRST_GAP = 0.25  # probes start this close together, then double up to the interval
CLOSE_PROBES = 8  # probes stay `first_gap` apart this many times (2 s by default): most apps answer within it


class AppStopped(Exception):
    """A container the preview needs exited or is restarting: no probe can succeed any more."""


def wait_healthy(url: str, interval: float, timeout: float, log: DeploymentLog, control: FlowControl,
                 watch: Callable[[], str | None] | None = None, first_gap: float = FIRST_GAP,
                 first_look: float = 0.0) -> bool:
    """Probe at once, then every `first_gap` (0.25 s) CLOSE_PROBES times (two seconds; a NestJS app answers in
    ~1.2 s), then at gaps doubling up to every `interval` seconds, and once more when `timeout` is reached; only
    200 is healthy (a redirect or a 204 from a catch-all is not the app answering its health path). `interval` is
    the ceiling of the spec's "every 5 seconds": an app that comes up in its first two seconds is seen within a
    quarter of a second.

    `first_gap`: the first pause (a waking preview is probed closer together, 8 times 0.05 s: a request waits).

    `watch` says why the preview cannot come up (an app that exited), or None; it is asked before a probe and
    between probes once a second (WATCH_SECONDS: it is a docker call), not before `first_look` seconds (a wake's
    containers were just started by the flow itself), and its answer ends the wait at once with AppStopped."""
    started = time.monotonic()
    attempt = 0
    gap, planned, looked = min(first_gap, interval), 0.0, started - WATCH_SECONDS + first_look
    with httpx.Client(timeout=min(interval, 10.0) + 1.0, follow_redirects=False, verify=shared_context()) as client:
        while True:
            control.check()
            # The first probe goes at once: an app that answers needs no look at its containers.
            if attempt and time.monotonic() - looked >= WATCH_SECONDS:
                looked = _look(watch, log)
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
            # The next probe after a growing gap, the last one exactly at `timeout`.
            planned = min(planned + gap, timeout)
            if attempt >= CLOSE_PROBES:
                gap = min(gap * 2, interval)
            next_probe = started + planned
            while (left := next_probe - time.monotonic()) > 0:  # looking between probes once a look is due
                due = looked + WATCH_SECONDS - time.monotonic()
                if watch and due <= 0 and left > 0.05:
                    looked = _look(watch, log)
                    continue
                control.wait(min(left, due) if watch and due > 0 else left)
                control.check()  # cancelled or out of time: wait() returned early


def _look(watch: Callable[[], str | None] | None, log: DeploymentLog) -> float:
    """AppStopped when `watch` says why the app cannot come up; else when it began to look."""
    began = time.monotonic()
    problem = watch() if watch else None
    if problem:
        log.note(f"health wait ended: {problem}")
        raise AppStopped(problem)
    return began
