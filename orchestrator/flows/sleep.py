"""Sleep and wake (PREVIEW_IDLE_MINUTES, docs/routing.md): a running preview no request reached through nginx for
that long has its containers stopped — volumes, ports, network and route kept — and is `sleeping`; the next
request makes nginx ask the service to wake it (http/resources/preview_wake.py), which queues a `wake` event.

Both run as events of the inbox, so they are serialised with the pull request's pushes and close like any flow:
a push to a sleeping preview deploys it as usual (it ends `running`), a close removes it, and concurrent requests
to a sleeping preview share one wake (one event per sleep, by its delivery id).

A preview's last request is its route's activity file's time (adapters/nginx/proxy.py: nginx logs there each request
that reaches the app), or its last deploy when that is later; a route written before sleep was switched on keeps
no activity file, and its preview never sleeps until its next deploy writes one.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.adapters.health import AppStopped, wait_healthy
from orchestrator.common.flow_control import FlowAborted, FlowControl
from orchestrator.flows import comments
from orchestrator.flows.context import FlowContext, Target
from orchestrator.flows.handler import FlowError
from orchestrator.flows.records import mark_sleeping, set_fields
from orchestrator.flows.reporting import Reporter
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.plugin_api.runtime import RuntimeFailure
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.state.records import DeploymentRecord, PullRequestEvent

log = logging.getLogger("orchestrator.flows.sleep")
WAKE_FIRST_GAP = 0.05  # a request waits for the wake: the health path is probed close together at first
WAKE_PROBE_CEILING = 0.5
FIRST_LOOK = 1.0  # a wake looks at its containers (docker ps and inspect: ~0.1 s) only after this, once a second


def last_request(record: DeploymentRecord, activity: float | None) -> datetime:
    """When the preview was last used: its last request through nginx, or its last deploy when that is later."""
    if activity is None:
        return record.updatedAt
    return max(record.updatedAt, datetime.fromtimestamp(activity, UTC))


def is_idle(record: DeploymentRecord, activity: float | None, now: datetime, idle_seconds: float) -> bool:
    """Whether a preview should sleep now: sleep is on (`idle_seconds` > 0), the preview is running, its route
    keeps an activity file (`activity` is not None) and its last use is at least `idle_seconds` ago."""
    if idle_seconds <= 0 or record.status != "running" or activity is None:
        return False
    return now - last_request(record, activity) >= timedelta(seconds=idle_seconds)


class SleepFlow:
    def __init__(self, context: FlowContext, reporter: Reporter) -> None:
        self.c = context
        self.reporter = reporter
        if context.settings.idle_seconds > 0 and not context.runtime.can_sleep:
            log.warning("PREVIEW_IDLE_MINUTES is set, but the %s runtime cannot wake a preview: previews never sleep",
                        context.runtime.name)

    @property
    def enabled(self) -> bool:
        """PREVIEW_IDLE_MINUTES is set and the runtime can wake what it stopped (it overrides Runtime's `wake`)."""
        return self.c.settings.idle_seconds > 0 and self.c.runtime.can_sleep

    def idle(self, now: datetime) -> list[tuple[DeploymentRecord, datetime]]:
        """Running previews to put to sleep, each with its last use (which names its `sleep` event)."""
        if not self.enabled:
            return []
        found = []
        for record in self.c.store.read().deployments.values():
            if record.status != "running":
                continue
            activity = self.c.proxy.last_activity(record.projectSlug, record.prNumber)
            if is_idle(record, activity, now, self.c.settings.idle_seconds):
                found.append((record, last_request(record, activity)))
        return found

    def sleep(self, event: PullRequestEvent) -> None:
        """Stop the containers of a preview that is still running and idle (a request or a push may have come
        since the event was queued: then nothing happens)."""
        record = self.c.store.read().deployments.get(event.deployment_id)
        if record is None or not self.enabled:
            return
        now = datetime.now(UTC)
        activity = self.c.proxy.last_activity(record.projectSlug, record.prNumber)
        if not is_idle(record, activity, now, self.c.settings.idle_seconds) or not mark_sleeping(
                self.c.store, record, now):
            log.info("not idle any more; stays awake", extra={"deploymentId": event.deployment_id})
            return
        target = self.c.target(record.projectSlug, record.prNumber, record.deploymentId)
        idle_minutes = self.c.settings.idle_seconds / 60
        target.log.note(f"no request for {self.c.settings.idle_seconds:.0f}s: going to sleep (containers stopped, "
                        "data, ports and route kept)")
        try:
            self.c.runtime.stop(event.deployment_id, target.log)
        except RuntimeFailure as exc:
            # Left `sleeping`: whatever was stopped, the next request's wake starts it all again.
            self.c.metrics.sleeps.labels("failure").inc()
            log.warning("sleep: %s: %s", exc.message, exc.detail, extra={"deploymentId": event.deployment_id})
            raise FlowError(f"Sleep failed: {exc.message}") from None
        self.c.metrics.sleeps.labels("success").inc()
        log.info("sleeping", extra={"deploymentId": event.deployment_id})
        link = self.c.proxy.reviewer_link(record.url, record.subject)
        self.reporter.comment(event, record.commentId, comments.sleeping(link, record.commitSha, idle_minutes))

    def wake(self, event: PullRequestEvent, control: FlowControl) -> None:
        """Start a sleeping preview's containers and wait for its health path; then `running`. Nothing to do when
        it is not sleeping (woken already by the request before, or deployed by a push)."""
        record = self.c.store.read().deployments.get(event.deployment_id)
        if record is None or record.status != "sleeping":
            return
        target = self.c.target(record.projectSlug, record.prNumber, record.deploymentId)
        started = time.monotonic()
        target.log.note("a request came: waking up")
        try:
            self._start(record, target, control)
        except FlowAborted as exc:
            target.log.note(exc.message)
            raise FlowError(exc.message) from None  # cancelled by a close (its cleanup follows) or out of time
        except _WakeFailed as exc:
            self._fail(event, record, target, exc, time.monotonic() - started)
            raise FlowError(exc.message) from None
        seconds = time.monotonic() - started
        set_fields(self.c.store, event.deployment_id, touch=False, status="running", sleptAt=None, error=None,
                   wokeAt=datetime.now(UTC))
        self.c.proxy.mark_activity(record.projectSlug, record.prNumber)  # the request that woke it
        control.settle()  # the requests waiting for the wake need not wait for the comment
        target.log.note(f"awake after {seconds:.2f}s")
        self.c.metrics.wakes.labels("success").inc()
        self.c.metrics.wake_seconds.labels("success").observe(seconds)
        log.info("woken up in %.2fs", seconds, extra={"deploymentId": event.deployment_id})
        link = self.c.proxy.reviewer_link(record.url, record.subject)
        self.reporter.comment(event, record.commentId, comments.awake(link, record.commitSha, seconds))

    def _start(self, record: DeploymentRecord, target: Target, control: FlowControl) -> None:
        compose_file = target.compose_file()
        if compose_file is None:
            raise _WakeFailed("Wake failed: the preview's compose file is gone")
        try:
            health_path = load_checkout_config(self.c.plugins, target.work_dir).health_check_path
        except (ConfigError, OSError) as exc:
            raise _WakeFailed(f"Wake failed: preview-config.yml cannot be read ({exc})") from None
        try:
            self.c.runtime.wake(record.deploymentId, compose_file, target.log, control)
        except RuntimeFailure as exc:
            raise _WakeFailed(f"Wake failed: {exc.message}", exc.detail) from None
        settings = self.c.settings
        # The app, then each routed service: a request to a route is handed back once that service answers.
        checks = [("app", record.exposedAppPort, health_path, "")] + [
            (route.service, route.port, route.healthCheckPath, f" of the route {route.name}")
            for route in record.routes]
        for service, port, path, shown in checks:
            url = self.c.runtime.app_url(record.deploymentId, port, path)
            try:
                healthy = wait_healthy(
                    url, min(settings.health_check_interval_seconds, WAKE_PROBE_CEILING),
                    settings.health_check_timeout_seconds, target.log, control, first_gap=WAKE_FIRST_GAP,
                    watch=lambda s=service: self.c.problem(record.deploymentId, s), first_look=FIRST_LOOK)
            except AppStopped as exc:
                raise _WakeFailed(f"Wake failed: {exc}", self._app_output(record, compose_file, service)) from None
            if not healthy:
                raise _WakeFailed(f"Wake failed: Health check timeout{shown}",
                                  self._app_output(record, compose_file, service))

    def _fail(self, event: PullRequestEvent, record: DeploymentRecord, target: Target, failure: _WakeFailed,
              seconds: float) -> None:
        """`failed`, with the reason in the record and the comment; its containers stopped again. A push
        deploys it afresh."""
        log.error("%s", failure.message, extra={"deploymentId": event.deployment_id})
        target.log.note(f"FAILED: {failure.message}")
        set_fields(self.c.store, event.deployment_id, touch=False, status="failed", sleptAt=None,
                   error=failure.message)
        try:
            self.c.runtime.stop(event.deployment_id, target.log)
        except RuntimeFailure as exc:
            log.warning("could not stop containers: %s", exc.detail or exc.message,
                        extra={"deploymentId": event.deployment_id})
        self.c.metrics.wakes.labels("failure").inc()
        self.c.metrics.wake_seconds.labels("failure").observe(seconds)
        self.reporter.comment(event, record.commentId,
                              comments.failed(failure.message, record.commitSha, self.c.mask(failure.detail)))

    def _app_output(self, record: DeploymentRecord, compose_file: Path, service: str = "app") -> str:
        try:
            return self.c.runtime.logs(record.deploymentId, compose_file, service, tail=40)
        except RuntimeFailure as exc:
            return exc.detail


class _WakeFailed(Exception):
    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
