"""Prometheus metrics (`GET /metrics`), one registry per application so that tests never share counters.

The webhook resource, the deploy engine and the code-host client record into the same `Metrics`; the
gauges that describe state (previews by status, queue depth) are computed when scraped, from the store and
the inbox, so they are right after a restart too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

DEPLOY_BUCKETS = (5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800)
HEALTH_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
STATUSES = ("building", "running", "failed", "sleeping")
WAKE_BUCKETS = (0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.webhooks = Counter("preview_orchestrator_webhooks", "Webhook deliveries by event and outcome",
                                ["event", "outcome"], registry=self.registry)
        self.deploys = Counter("preview_orchestrator_deploys", "Finished deploys and updates by framework and result",
                               ["framework", "result"], registry=self.registry)
        self.cleanups = Counter("preview_orchestrator_cleanups", "Finished cleanups by result", ["result"],
                                registry=self.registry)
        self.deploy_seconds = Histogram("preview_orchestrator_deploy_duration_seconds",
                                        "Deploy or update, webhook processing start to running or failed",
                                        ["result"], buckets=DEPLOY_BUCKETS, registry=self.registry)
        self.health_seconds = Histogram("preview_orchestrator_health_check_duration_seconds",
                                        "Containers started to the health path answering (or giving up)",
                                        ["result"], buckets=HEALTH_BUCKETS, registry=self.registry)
        self.stage_seconds = Histogram("preview_orchestrator_stage_duration_seconds",
                                       "Seconds each stage of a deploy or update took (checkout, build_commands, "
                                       "render, build, start, health, route)", ["stage"], buckets=DEPLOY_BUCKETS,
                                       registry=self.registry)
        self.sleeps = Counter("preview_orchestrator_sleeps", "Previews put to sleep (PREVIEW_IDLE_MINUTES) by result",
                              ["result"], registry=self.registry)
        self.wakes = Counter("preview_orchestrator_wakes", "Sleeping previews woken by a request, by result",
                             ["result"], registry=self.registry)
        self.wake_seconds = Histogram("preview_orchestrator_wake_duration_seconds",
                                      "Wake of a sleeping preview: containers started to the health path answering",
                                      ["result"], buckets=WAKE_BUCKETS, registry=self.registry)
        self.codehost_calls = Counter("preview_orchestrator_codehost_requests",
                                      "Code host API requests by kind and response status",
                                      ["kind", "status"], registry=self.registry)
        self.codehost_retries = Counter("preview_orchestrator_codehost_retries",
                                        "Code host API requests retried after a transient failure", ["kind"],
                                        registry=self.registry)
        self.reconciles = Counter("preview_orchestrator_reconciles",
                                  "Repositories compared with their code host's open pull requests, by code host and "
                                  "result (done, unreachable, rate_limited)", ["codehost", "result"],
                                  registry=self.registry)
        self.reconcile_corrections = Counter("preview_orchestrator_reconcile_corrections",
                                             "Events the reconcile queued because no webhook had said so, by code "
                                             "host and action (opened, synchronize, closed)", ["codehost", "action"],
                                             registry=self.registry)
        self.codehost_rate_limit = Gauge("preview_orchestrator_codehost_rate_limit_remaining",
                                         "Requests the code host's API allows until its rate limit resets, as its "
                                         "last answer said", ["codehost"], registry=self.registry)

    def watch_state(self, previews_by_status: Callable[[], dict[str, int]], queue_depth: Callable[[], int]) -> None:
        """Register the scrape-time gauges (the app does this once it has the store and the inbox)."""
        self.registry.register(_StateCollector(previews_by_status, queue_depth))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, previews_by_status: Callable[[], dict[str, int]], queue_depth: Callable[[], int]) -> None:
        self._previews = previews_by_status
        self._depth = queue_depth

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._previews()
        previews = GaugeMetricFamily("preview_orchestrator_previews", "Tracked previews by status",
                                     labels=["status"])
        for status in STATUSES:
            previews.add_metric([status], counts.get(status, 0))
        yield previews
        yield GaugeMetricFamily("preview_orchestrator_previews_running", "Previews serving",
                                value=counts.get("running", 0))
        yield GaugeMetricFamily("preview_orchestrator_queue_depth", "Accepted events not yet finished",
                                value=self._depth())

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())
