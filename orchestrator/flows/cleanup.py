"""The cleanup flow: remove everything of a deployment, going on past failures. The record and its ports are
forgotten only once nothing is left; otherwise the record stays (failed, with what is left) and the cleanup is
tried again every CLEANUP_RETRY_INTERVAL_SECONDS (events/cleanup_retry.py) until it finishes."""

from __future__ import annotations

import logging

from orchestrator.adapters.nginx import ProxyError
from orchestrator.common.checkout_paths import remove_tree
from orchestrator.flows import comments
from orchestrator.flows.context import FlowContext
from orchestrator.flows.handler import FlowError
from orchestrator.flows.records import forget, set_fields
from orchestrator.flows.reporting import Reporter
from orchestrator.rendering.compose_document import build_dir
from orchestrator.state.records import DeploymentRecord, PullRequestEvent

log = logging.getLogger("orchestrator.flows.cleanup")
INCOMPLETE = "Cleanup incomplete: "  # starts the error of a record whose cleanup is retried (events/cleanup_retry.py)
RETRY_PREFIX = "cleanup-retry-"  # the delivery id of such a retry


class CleanupFlow:
    def __init__(self, context: FlowContext, reporter: Reporter) -> None:
        self.c = context
        self.reporter = reporter

    def run(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> None:
        extra = {"deploymentId": event.deployment_id}
        if event.delivery_id.startswith(RETRY_PREFIX) and not incomplete(existing):
            log.info("cleanup retry not run: the preview's cleanup is no longer incomplete", extra=extra)
            return  # a reopen deployed it again meanwhile, or another cleanup finished it
        target = self.c.target(event.project_slug, event.pr_number, event.deployment_id)
        problems = self.c.runtime.remove(event.deployment_id, target.compose_file())
        try:
            remove_tree(target.work_dir)
            remove_tree(target.git_dir)
            remove_tree(build_dir(target.work_dir))
            target.log.path.unlink(missing_ok=True)
        except OSError as exc:
            problems.append(f"work directory: {exc.strerror}")
        try:
            # nginx may still serve a tracked preview's route even when its file is gone (a crash, or an earlier
            # cleanup whose reload failed), so a tracked preview's cleanup always reloads.
            self.c.proxy.remove(target.slug, target.pr, None, reload_anyway=existing is not None)
        except ProxyError as exc:
            problems.append(f"proxy: {exc}")
        self.c.metrics.cleanups.labels("failure" if problems else "success").inc()
        if problems:
            message = INCOMPLETE + "; ".join(problems)
            for problem in problems:
                log.error("cleanup: %s", problem, extra=extra)
            set_fields(self.c.store, event.deployment_id, touch=False, status="failed", error=message)
            raise FlowError(message)
        forget(self.c.store, event.deployment_id)
        if existing is not None and existing.commentId is not None:
            self.reporter.comment(event, existing.commentId, comments.removed())
        if existing is not None:  # the deployment (GitHub) becomes inactive; hosts without deployments decide
            self.reporter.status(event, existing.codehostDeploymentId, "inactive", "Preview removed",
                                 sha=existing.commitSha or None)
        log.info("cleaned up", extra=extra)


def incomplete(record: DeploymentRecord | None) -> bool:
    """A record the cleanup flow left behind: something of the preview could not be removed yet."""
    return record is not None and record.status == "failed" and (record.error or "").startswith(INCOMPLETE)
