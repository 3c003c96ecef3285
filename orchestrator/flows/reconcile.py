"""Start-up reconciliation (after a crash: stop what the last run left running, settle records left building,
remove what has no record) and the TTL's question: which previews have expired (sleeping ones too: their cleanup
removes the stopped containers like running ones). A `sleeping` record is left as it is at start-up: its
containers stay stopped until a request wakes it."""

from __future__ import annotations

import logging
import shutil
import threading
from datetime import datetime, timedelta
from pathlib import Path

from orchestrator.adapters.leftovers import stop_marked_processes
from orchestrator.adapters.nginx import ACTIVITY_DIR, OPEN_DIR, ProxyError
from orchestrator.adapters.nginx.route import HEADER
from orchestrator.adapters.nginx_site import SERVERS_DIR
from orchestrator.common.naming import is_valid_deployment_id, parse_deployment_id, preview_name, preview_segment
from orchestrator.flows import comments
from orchestrator.flows.cleanup import incomplete
from orchestrator.flows.context import FlowContext
from orchestrator.flows.records import mark_lost, set_fields
from orchestrator.flows.reporting import Reporter
from orchestrator.plugin_api.runtime import RuntimeFailure
from orchestrator.state.records import DeploymentRecord, StoreFile, event_for_record

log = logging.getLogger("orchestrator.flows.reconcile")
INTERRUPTED = "Interrupted by a service restart; push a commit to retry"


class Reconciler:
    def __init__(self, context: FlowContext, reporter: Reporter) -> None:
        self.c = context
        self.reporter = reporter
        self.reports: threading.Thread | None = None  # startup's reports of interrupted deploys

    def startup(self, open_deployments: set[str]) -> None:
        stop_marked_processes(self.c.env.marker)
        self._quietly(lambda: self.c.runtime.remove_leftovers(self.c.env.marker))
        data = self.c.store.read()
        interrupted = [record for deployment_id, record in data.deployments.items()
                       if record.status == "building" and deployment_id not in open_deployments]
        for record in interrupted:
            set_fields(self.c.store, record.deploymentId, status="failed", error=INTERRUPTED)
            log.warning("left building by a restart; marked failed", extra={"deploymentId": record.deploymentId})
        # The pull requests hear of it in the background: with the code host slow or down, retrying each
        # comment would keep the service from answering webhooks for as long.
        self.reports = threading.Thread(target=self._report_interrupted, args=(interrupted,),
                                        name="startup-reports", daemon=True)
        self.reports.start()
        known = set(data.deployments) | open_deployments
        owned = self._quietly(self.c.runtime.owned) or {}
        for deployment_id in sorted(set(owned.values()) - known):
            log.warning("removing resources with no record", extra={"deploymentId": deployment_id})
            for problem in self.c.runtime.remove(deployment_id, None):
                log.warning("%s", problem, extra={"deploymentId": deployment_id})
        self._remove_stale_routes(data)
        self._renew_routes(data)
        self._remove_stale_work_dirs(data, open_deployments)
        for name in self.c.git.remove_unkeyed_mirrors():
            log.warning("removed git mirror %s: shared by every repository of its slug (the old layout)", name)

    def expired(self, now: datetime) -> list[DeploymentRecord]:
        """Previews whose last deploy or update (`updatedAt`) is older than CLEANUP_TTL_DAYS; never a base preview
        (it stands while its repository is in BASE_PREVIEWS)."""
        if self.c.settings.cleanup_ttl_days == 0:
            return []
        cutoff = now - timedelta(days=self.c.settings.cleanup_ttl_days)
        return [r for r in self.c.store.read().deployments.values() if r.updatedAt < cutoff and not r.is_base]

    def unfinished_cleanups(self) -> list[DeploymentRecord]:
        """Previews whose cleanup left something behind (the record says what): to be cleaned up again."""
        return [r for r in self.c.store.read().deployments.values() if incomplete(r)]

    def report_lost(self) -> int:
        """Running previews the runtime knows to be gone (a swarm node that left): failed, with the reason in the
        record, the comment and the deployment status; the next push deploys them again. Returns how many."""
        running = [r for r in self.c.store.read().deployments.values() if r.status == "running"]
        lost = self._quietly(lambda: self.c.runtime.lost_previews([r.deploymentId for r in running])) or {}
        reported = 0
        for record in running:
            why = lost.get(record.deploymentId)
            if why is None or not mark_lost(self.c.store, record, why):
                continue  # not lost, or a flow took the preview over meanwhile
            reported += 1
            log.warning("lost: %s", why, extra={"deploymentId": record.deploymentId})
            event = event_for_record(record, "synchronize", f"lost-{record.deploymentId}")
            if record.commentId is not None:
                self.reporter.comment(event, record.commentId, comments.failed(why, record.commitSha))
            self.reporter.status(event, record.codehostDeploymentId, "failure", why)
        return reported

    def _report_interrupted(self, records: list[DeploymentRecord]) -> None:
        """Deploys a crash cut short (marked failed): the pull requests' comments and deployments say so."""
        for record in records:
            current = self.c.store.read().deployments.get(record.deploymentId)
            if current is None or current.status != "failed" or current.error != INTERRUPTED:
                continue  # a push or a close took the preview over meanwhile: its own comment is the news
            event = event_for_record(record, "synchronize", f"restart-{record.deploymentId}")
            if record.commentId is not None:
                self.reporter.comment(event, record.commentId, comments.failed(INTERRUPTED, record.commitSha))
            self.reporter.status(event, record.codehostDeploymentId, "failure", INTERRUPTED)

    def _remove_stale_routes(self, data: StoreFile) -> None:
        names = {preview_name(r.projectSlug, r.prNumber) for r in data.deployments.values()}
        routes = {f"{name}.conf" for name in names}
        # both routing modes' files: locations beside the site (path) and servers (host, SERVERS_DIR), of pull
        # requests and base previews
        directory = self.c.settings.proxy_config_dir
        found = [*directory.glob("*-pr-*.conf"), *directory.glob(f"{SERVERS_DIR}/*-pr-*.conf")]
        found += [path for path in (*directory.glob("*-base.conf"), *directory.glob(f"{SERVERS_DIR}/*-base.conf"))
                  if _written_by_us(path)]  # (an operator's own `rate-base.conf` stays)
        stale = [p for p in found if p.name not in routes]
        for path in stale:
            path.unlink(missing_ok=True)
        if stale:
            self._quietly(lambda: self.c.proxy.reload(None))
        # activity files of sleep (adapters/nginx/proxy.py), after the reload: nginx no longer writes to them
        logs = {f"{name}.log" for name in names}
        for path in [*directory.glob(f"{ACTIVITY_DIR}/*-pr-*.log"), *directory.glob(f"{ACTIVITY_DIR}/*-base.log")]:
            if path.name not in logs:
                path.unlink(missing_ok=True)
        # routes' flags (a route opens with its flag): none without a record, so no later route starts open
        for path in [*directory.glob(f"{OPEN_DIR}/*-pr-*"), *directory.glob(f"{OPEN_DIR}/*-base")]:
            if path.name not in names:
                path.unlink(missing_ok=True)

    def _renew_routes(self, data: StoreFile) -> None:
        """Routes written by an older version, rewritten as today's (docs/security.md, "Between previews"): the
        rules of a route hold for the previews that were running before the upgrade too, without a push."""
        routes = [(r.projectSlug, r.prNumber, r.deploymentId, r.subject, [(x.name, x.port) for x in r.routes])
                  for r in data.deployments.values()
                  if r.status in ("running", "sleeping", "failed", "building")]  # open routes only: Proxy.renew
        renewed = self._quietly(lambda: self.c.proxy.renew(routes)) or []
        if renewed:
            log.warning("rewrote %d nginx routes written by an older version: %s", len(renewed), ", ".join(renewed))

    def _remove_stale_work_dirs(self, data: StoreFile, open_deployments: set[str]) -> None:
        dirs = {(r.projectSlug, preview_segment(r.prNumber)) for r in data.deployments.values()}
        dirs |= {(slug, preview_segment(pr)) for slug, pr in map(parse_deployment_id,
                                                                  filter(is_valid_deployment_id, open_deployments))}
        root = self.c.settings.deployments_dir
        base = [path for name in ("base", "base.git", "base.build") for path in root.glob(f"*/{name}")]
        for work in [*root.glob("*/pr-*"), *base] if root.is_dir() else []:
            name = work.name.removesuffix(".git").removesuffix(".build")
            if work.is_dir() and (work.parent.name, name) not in dirs:
                log.warning("removing work directory %s with no record", work)
                shutil.rmtree(work, ignore_errors=True)
                (work.parent / f"{name}.log").unlink(missing_ok=True)

    @staticmethod
    def _quietly(function):  # noqa: ANN001, ANN205
        """The runtime or nginx being unavailable must not stop start-up."""
        try:
            return function()
        except (RuntimeFailure, ProxyError, OSError) as exc:
            log.warning("%s", getattr(exc, "message", exc))
            return None


def _written_by_us(path: Path) -> bool:
    """A route file the service wrote (route.HEADER is its first line)."""
    try:
        with path.open("rb") as route:
            return route.readline().startswith(HEADER.partition("{")[0].encode())
    except OSError:
        return False
