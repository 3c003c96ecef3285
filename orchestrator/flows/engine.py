"""The deploy engine: what EVENT_HANDLER builds by default. It wires the flows to the adapters and the runtime
(chosen by RUNTIME through the plugin host) and sends each event to its flow:

    handle(event) → deploy.py (opened, reopened, synchronize: deploy, or update in place; relink: restart.py)
                  → cleanup.py (closed)
                  → commands.py (command: a `/preview …` comment; redeploy, destroy, reset-db, extend, approve)
                  → sleep.py (sleep, wake: the service's own events, PREVIEW_IDLE_MINUTES)
    startup(...)  → reconcile.py (once, before the first event)    expired(now) → reconcile.py (the TTL)
    watch()       → reconcile.py (running previews the runtime reports lost)
    unfinished_cleanups() → reconcile.py (records a cleanup left behind: cleaned up again)
    collect_garbage() → the runtime's (the swarm registry's garbage collection)
    idle(now)     → sleep.py (running previews no request reached for PREVIEW_IDLE_MINUTES)
"""

from __future__ import annotations

import logging
from datetime import datetime

from orchestrator.common.flow_control import FlowControl, unlimited
from orchestrator.flows import base_dependencies, comments
from orchestrator.flows.base_previews import BasePreviews
from orchestrator.flows.cleanup import CleanupFlow
from orchestrator.flows.commands import CommandFlow
from orchestrator.flows.context import Adapters, FlowContext
from orchestrator.flows.deploy import DeployFlow
from orchestrator.flows.handler import FlowError
from orchestrator.flows.links import Links
from orchestrator.flows.reconcile import INTERRUPTED, Reconciler
from orchestrator.flows.reporting import Reporter
from orchestrator.flows.restart import restarts
from orchestrator.flows.sleep import SleepFlow
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.runtime import Runtime, WarmPool
from orchestrator.rendering.plugin_host import CodeHosts, PluginHost
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, DeploymentTaken, PullRequestEvent, check_owner
from orchestrator.state.store import DeploymentStore

__all__ = ["INTERRUPTED", "DeployEngine", "build_engine"]
log = logging.getLogger("orchestrator.flows.engine")
FORK_REFUSAL = ("Pull requests from forks are not deployed: their code would run on the preview host. "
                "Someone with write permission who reviewed it can comment `/preview approve {sha}` to deploy this "
                "commit (each new push needs approving again), push the branch to this repository, or the operator "
                "can set ALLOW_FORK_PRS=true.")


def build_engine(settings: Settings, *, plugins: PluginHost, metrics: Metrics, store: DeploymentStore,
                 codehosts: CodeHosts) -> DeployEngine:
    """The default EVENT_HANDLER, called by the composition root (http/app.py `create_app`) with what it built
    once: the engine with the code hosts that are on and the runtime RUNTIME names."""
    runtime = plugins.runtime(settings.runtime, settings)
    return DeployEngine(settings, plugins, codehosts, metrics, store, runtime,
                        Adapters.for_settings(settings, codehosts, runtime))


class DeployEngine:
    """Every dependency is given (build_engine): the engine builds none of them."""

    def __init__(self, settings: Settings, plugins: PluginHost, codehosts: CodeHosts, metrics: Metrics,
                 store: DeploymentStore, runtime: Runtime, adapters: Adapters) -> None:
        self.context = FlowContext(settings, plugins, codehosts, metrics, runtime, store, adapters)
        self.reporter = Reporter(codehosts, self.context.store, settings)
        self.deploy_flow = DeployFlow(self.context, self.reporter)
        self.cleanup_flow = CleanupFlow(self.context, self.reporter)
        self.reconciler = Reconciler(self.context, self.reporter)
        self.sleep_flow = SleepFlow(self.context, self.reporter)
        self.command_flow = CommandFlow(self.context, self.reporter, self.deploy_flow, self.cleanup_flow)
        self.bases = BasePreviews(self.context)
        self.links = Links(self.context)
        # What tests and embedders reach for.
        self.settings, self.plugins, self.codehosts, self.metrics = settings, plugins, codehosts, metrics
        self.store, self.proxy, self.runtime = self.context.store, self.context.proxy, self.context.runtime

    def handle(self, event: PullRequestEvent, control: FlowControl | None = None) -> None:
        control = control or unlimited()
        existing = self.store.read().deployments.get(event.deployment_id)
        try:
            check_owner(existing, event)
        except DeploymentTaken as taken:
            raise FlowError(taken.message) from None
        if event.action == "sleep":
            self.sleep_flow.sleep(event)
        elif event.action == "wake":
            self.sleep_flow.wake(event, control)
        elif event.action == "command":  # a `/preview …` comment: its author's permission is checked there
            self.command_flow.run(event, existing, control)
        elif event.action != "closed" and event.from_fork and not self.settings.allow_fork_prs:
            self._refuse_fork(event, existing)
        elif event.action == "closed":
            self.cleanup_flow.run(event, existing)
        elif event.trigger == "relink" and not restarts(event, existing):
            # Its commit or state changed since the look (a deploy resolved its links anew), or it is gone.
            log.info("links not restarted: the preview changed since", extra={"deploymentId": event.deployment_id})
        else:  # a preview that exists is updated in place; one whose links moved is restarted at its commit
            self.deploy_flow.run(event, existing, control, restart=event.trigger == "relink")

    def startup(self, open_deployments: set[str]) -> None:
        self.reconciler.startup(open_deployments)

    def expired(self, now: datetime) -> list[DeploymentRecord]:
        return self.reconciler.expired(now)

    def base_previews(self) -> list[tuple[PullRequestEvent, str]]:
        return self.bases.due()

    def relinks(self) -> list[tuple[PullRequestEvent, str]]:
        return self.links.relinks()

    def idle(self, now: datetime) -> list[tuple[DeploymentRecord, datetime]]:
        return self.sleep_flow.idle(now)

    def watch(self) -> int:
        return self.reconciler.report_lost()

    def unfinished_cleanups(self) -> list[DeploymentRecord]:
        return self.reconciler.unfinished_cleanups()

    def collect_garbage(self) -> bool:
        return self.runtime.collect_garbage()

    def pools(self) -> list[WarmPool]:
        return self.runtime.pools() + base_dependencies.pools(self.context)

    @property
    def garbage_interval_seconds(self) -> float:
        return self.runtime.garbage_interval_seconds

    def secrets(self) -> list[str]:
        return self.context.secrets()

    def password_key(self) -> bytes:
        return self.context.password_key()

    def _refuse_fork(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> None:
        """Forks run code from outside the team: one comment on opening, nothing recorded, nothing run. A push to
        one whose commit was approved (`/preview approve`) keeps the approved preview, and its comment says how to
        approve the new commit."""
        log.info("pull request from fork %s not deployed", event.head_repo_full_name,
                 extra={"deploymentId": event.deployment_id})
        if event.action in ("opened", "reopened") and existing is None:
            self.reporter.refuse(event, FORK_REFUSAL.format(sha=event.commit_sha or "COMMIT"))
        elif existing is not None and existing.status == "running" and event.commit_sha != existing.commitSha:
            link = self.proxy.reviewer_link(existing.url, existing.subject)
            self.reporter.comment(event, existing.commentId,
                                  comments.fork_push_held(link, existing.commitSha, event.commit_sha or "COMMIT"))
