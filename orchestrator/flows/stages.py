"""Where the time of a deploy went: each stage timed into the deployment log, `/metrics`
(preview_orchestrator_stage_duration_seconds) and the ready comment."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.observability.metrics import Metrics


class StageClock:
    """One per flow run (never shared between flows: it holds this run's figures)."""

    def __init__(self, log: DeploymentLog, metrics: Metrics) -> None:
        self._log = log
        self._metrics = metrics
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.seconds[name] = self.seconds.get(name, 0.0) + took
            self._metrics.stage_seconds.labels(name).observe(took)
            self._log.note(f"stage {name}: {took:.1f}s")
