"""The deploy flow, which is also the update flow (a preview that exists is updated in place): comment and
deployment status, the record, the build steps, then `running` or `failed` with a comment that says why."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

from orchestrator.common.flow_control import FlowAborted, FlowControl
from orchestrator.flows import comments
from orchestrator.flows.build_steps import BuildSteps
from orchestrator.flows.context import FlowContext, StepFailed, Target
from orchestrator.flows.handler import FlowError
from orchestrator.flows.records import begin, set_fields
from orchestrator.flows.reporting import Reporter
from orchestrator.flows.restart import restarts
from orchestrator.plugin_api.runtime import RuntimeFailure
from orchestrator.state.ports import MAX_PR_NUMBER, OUT_OF_RANGE, PortAllocationError
from orchestrator.state.records import DeploymentRecord, PullRequestEvent

log = logging.getLogger("orchestrator.flows.deploy")


class DeployFlow:
    def __init__(self, context: FlowContext, reporter: Reporter) -> None:
        self.c = context
        self.reporter = reporter
        self.steps = BuildSteps(context)

    def run(self, event: PullRequestEvent, existing: DeploymentRecord | None, control: FlowControl,
            comment_id: int | None = None, restart: bool = False) -> None:
        """`comment_id`: the pull request's comment to edit when there is no record yet (a refused fork's).
        `restart`: no commit fetched, nothing built when the preview runs the event's commit already (restart.py)."""
        started = time.monotonic()
        target = self.c.target(event.project_slug, event.pr_number, event.deployment_id)
        updating = existing is not None
        if not updating and (refusal := self.refusal(event)):
            self.reporter.refuse(event, refusal)
            raise FlowError(refusal)
        comment_id = self.reporter.comment(event, existing.commentId if existing else comment_id,
                                           comments.building(event.commit_sha, updating))
        try:
            record = begin(self.c.store, event, comment_id,
                           self.c.settings.preview_url(event.project_slug, event.pr_number),
                           self.c.settings.max_concurrent_previews, self.c.limit_message(), self.c.ports_in_use)
        except PortAllocationError as exc:
            self.reporter.comment(event, comment_id, comments.failed(str(exc), event.commit_sha))
            raise FlowError(str(exc)) from None
        target.log.note(f"{'update' if updating else 'deploy'} of {event.commit_sha} ({event.delivery_id})")
        log.info("%s started", "update" if updating else "deploy", extra={"deploymentId": event.deployment_id})
        # The code host's deployment and its `in_progress` status (a few requests, ~1 s on a slow API) while the
        # steps run: they need nothing from it. Awaited before any later status, so the code host sees them in order.
        reporting = ThreadPoolExecutor(1, thread_name_prefix="codehost-deployment")
        started_report = reporting.submit(self.reporter.start, event, existing)
        reporting.shutdown(wait=False)
        try:
            # A sleeping preview's route is served too (its wake location answers): unchanged, it is not reloaded.
            built = self.steps.run(event, target, record, control,
                                   route_served=existing is not None and existing.status in ("running", "sleeping"),
                                   restart=restart and restarts(event, existing))
        except FlowAborted as exc:
            self._abort(event, target, comment_id, _reported(started_report), exc, time.monotonic() - started)
            raise FlowError(exc.message) from None
        except Exception as exc:  # noqa: BLE001 - any failure ends the deploy as `failed`, internal ones too
            failure = exc if isinstance(exc, StepFailed) else StepFailed("Deployment failed (internal error)")
            self._fail(event, target, comment_id, _reported(started_report), failure, time.monotonic() - started)
            raise FlowError(failure.message) from (None if exc is failure else exc)
        reported = _reported(started_report)
        set_fields(self.c.store, event.deployment_id, status="running", error=None)
        seconds = time.monotonic() - started
        target.log.note(f"running after {seconds:.1f}s")
        # What the containers said as they came up goes into the log while the code host hears of it.
        with ThreadPoolExecutor(1, thread_name_prefix="output") as pool:
            kept = pool.submit(self.steps.keep_output, event, target, record, built.compose_file)
            # PREVIEW_PROTECTION=token: the comment's link carries a signed token; the record keeps the clean URL.
            link = self.c.proxy.reviewer_link(record.url, record.subject)
            now = self.c.store.read().deployments.get(event.deployment_id) or record
            routes = [(route.name, self.c.proxy.reviewer_link(route.url, record.subject)) for route in now.routes]
            self.reporter.comment(event, comment_id, comments.ready(link, event.commit_sha, seconds, built.stages,
                                                                       built.migrations, routes, now.links))
            self.reporter.status(event, reported, "success",
                                 f"Preview of {event.commit_sha[:7] if event.commit_sha else ''} running",
                                 environment_url=record.url)
        if (error := kept.exception()) is not None:
            target.log.note(f"container output not kept: {error!r}")
        self._count(event.deployment_id, "success", seconds)
        log.info("preview running at %s", record.url, extra={"deploymentId": event.deployment_id})

    def refusal(self, event: PullRequestEvent) -> str | None:
        """Why a new preview cannot be made at all, before anything is touched."""
        if event.pr_number > MAX_PR_NUMBER:
            return OUT_OF_RANGE
        deployments = self.c.store.read().deployments
        if event.deployment_id not in deployments and len(deployments) >= self.c.settings.max_concurrent_previews:
            return self.c.limit_message()
        return None

    def _fail(self, event: PullRequestEvent, target: Target, comment_id: int | None, reported: int | None,
              failure: StepFailed, seconds: float) -> None:
        log.error("%s", failure.message, extra={"deploymentId": event.deployment_id})
        target.log.note(f"FAILED: {failure.message}")
        self._settle_failed(event.deployment_id, failure.message, target)
        self.reporter.comment(event, comment_id, comments.failed(failure.message, event.commit_sha,
                                                                 self.c.mask(failure.detail), seconds))
        self.reporter.status(event, reported, "failure", failure.message)
        self._count(event.deployment_id, "failure", seconds)

    def _abort(self, event: PullRequestEvent, target: Target, comment_id: int | None, reported: int | None,
               aborted: FlowAborted, seconds: float) -> None:
        """Out of time: a failure like any other. Cancelled (the pull request closed, or a DELETE): the cleanup
        queued behind this flow removes everything, so the comment and the code host are left to it."""
        if not aborted.cancelled:
            self._fail(event, target, comment_id, reported, StepFailed(aborted.message), seconds)
            return
        log.info("%s", aborted.message, extra={"deploymentId": event.deployment_id})
        target.log.note(aborted.message)
        self._settle_failed(event.deployment_id, aborted.message, target)

    def _settle_failed(self, deployment_id: str, message: str, target: Target) -> None:
        try:
            set_fields(self.c.store, deployment_id, status="failed", error=message)
        except Exception:  # noqa: BLE001 - the failure comment still goes out
            log.exception("could not record the failure", extra={"deploymentId": deployment_id})
        try:
            self.c.runtime.stop(deployment_id, target.log)
        except RuntimeFailure as exc:
            log.warning("could not stop containers: %s", exc.detail or exc.message,
                        extra={"deploymentId": deployment_id})

    def _count(self, deployment_id: str, result: str, seconds: float) -> None:
        record = self.c.store.read().deployments.get(deployment_id)
        framework = record.framework if record and record.framework else "unknown"
        self.c.metrics.deploys.labels(framework, result).inc()
        self.c.metrics.deploy_seconds.labels(result).observe(seconds)


def _reported(started: Future[int | None]) -> int | None:
    """The code host's deployment id `Reporter.start` made (None when it could not: logged there)."""
    try:
        return started.result()
    except Exception:  # noqa: BLE001 - reporting never fails a deploy
        log.exception("deployment not reported")
        return None
