"""The deploy engine: the spec's deploy, update and cleanup flows, run by the dispatcher one at a time per
deployment. Read top to bottom: `handle` → a flow → its steps → the adapters (git, compose, proxy, code host)."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator import comments
from orchestrator.checkout import load_checkout_config
from orchestrator.codehost import CodeHost, CodeHostError
from orchestrator.commands import CommandFailed, DeploymentLog, clean_env, deployment_log_path, run
from orchestrator.docker_compose import Compose, labelled, published_host_ports, remove_labelled
from orchestrator.git_ops import CloneRefused, Git
from orchestrator.handler import FlowError
from orchestrator.health import wait_healthy
from orchestrator.metrics import Metrics
from orchestrator.models import DeploymentRecord, PullRequestEvent, StoreFile
from orchestrator.plugin_host import PluginHost, build_plugin_host
from orchestrator.ports import PortAllocationError, allocate
from orchestrator.preview_config import ConfigError
from orchestrator.proxy import Proxy, ProxyError
from orchestrator.rendering import (
    GENERATED_COMPOSE,
    REPO_COMPOSE_OUTPUT,
    make_context,
    render_deployment,
    write_rendered,
)
from orchestrator.settings import Settings
from orchestrator.store import DeploymentStore

log = logging.getLogger("orchestrator.engine")
INTERRUPTED = "Interrupted by a service restart; push a commit to retry"


class StepFailed(Exception):
    """A deploy step failed with the spec's user-facing message; `detail` is the log tail for the comment."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


@dataclass(frozen=True)
class Target:
    """Where one deployment lives on this host."""

    deployment_id: str
    slug: str
    pr: int
    work_dir: Path
    log: DeploymentLog


class DeployEngine:
    def __init__(self, settings: Settings, plugins: PluginHost | None = None,
                 codehost: CodeHost | None = None, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.plugins = plugins or build_plugin_host(disabled=settings.preview_orchestrator_disable_plugins)
        self.metrics = metrics or Metrics()
        self.store = DeploymentStore(settings.deployments_db)
        self.codehost = codehost or CodeHost(settings.codehost_api_url, settings.codehost_token.get_secret_value(),
                                             retry_base=settings.codehost_retry_base_seconds, metrics=self.metrics)
        home = settings.deployments_dir
        self.git = Git(settings.codehost_token.get_secret_value(), settings.codehost_api_url,
                       settings.allowed_clone_protocols, settings.git_timeout_seconds, home)
        self.compose = Compose(settings.compose_timeout_seconds, home)
        self.proxy = Proxy(settings.proxy_config_dir, settings.proxy_test_command, settings.proxy_reload_command)
        self._secrets = settings.secret_values()

    # Entry point -----------------------------------------------------------------------------

    def handle(self, event: PullRequestEvent) -> None:
        existing = self.store.read().deployments.get(event.deployment_id)
        if event.action != "closed" and event.from_fork and not self.settings.allow_fork_prs:
            self._refuse_fork(event)
            return
        if event.action == "closed":
            self.cleanup(event, existing)
        elif existing is None:
            self.deploy(event, None)
        else:
            self.deploy(event, existing)  # opened again, reopened or synchronize: update in place

    def _refuse_fork(self, event: PullRequestEvent) -> None:
        """Forks run code from outside the team: one comment on opening, nothing recorded, nothing run."""
        log.info("pull request from fork %s not deployed", event.head_repo_full_name,
                 extra={"deploymentId": event.deployment_id})
        if event.action in ("opened", "reopened"):
            self._comment(event, None, comments.refused(
                "Pull requests from forks are not deployed: their code would run on the preview host. "
                "A maintainer can push the branch to this repository, or the operator can set ALLOW_FORK_PRS=true."
            ))

    def target(self, slug: str, pr: int, deployment_id: str) -> Target:
        root = self.settings.deployments_dir.resolve()
        work = (root / slug / f"pr-{pr}").resolve()
        if not work.is_relative_to(root) or work == root:
            raise FlowError("Invalid deployment path")
        return Target(deployment_id, slug, pr, work, DeploymentLog(deployment_log_path(root, slug, pr)))

    # Deploy and update -------------------------------------------------------------------------

    def deploy(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> None:
        started = time.monotonic()
        target = self.target(event.project_slug, event.pr_number, event.deployment_id)
        extra = {"deploymentId": event.deployment_id}
        updating = existing is not None
        if not updating and self._at_limit(event.deployment_id):
            self._comment(event, None, comments.refused(self._limit_message()))
            raise FlowError(self._limit_message())
        comment_id = self._comment(event, existing.commentId if existing else None,
                                   comments.building(event.commit_sha, updating))
        try:
            record = self._begin(event, comment_id)
        except PortAllocationError as exc:
            self._comment(event, comment_id, comments.failed(str(exc), event.commit_sha))
            raise FlowError(str(exc)) from None
        target.log.note(f"{'update' if updating else 'deploy'} of {event.commit_sha} ({event.delivery_id})")
        log.info("%s started", "update" if updating else "deploy", extra=extra)
        reported = self._report_start(event, existing)
        try:
            self._build_and_start(event, target, record, route_served=existing is not None
                                  and existing.status == "running")
        except Exception as exc:  # noqa: BLE001 - any failure ends the deploy as `failed`, internal ones too
            failure = exc if isinstance(exc, StepFailed) else StepFailed("Deployment failed (internal error)")
            seconds = time.monotonic() - started
            self._fail(event, target, comment_id, failure, seconds)
            self._report(event, reported, "failure", failure.message)
            self._count_deploy(event.deployment_id, "failure", seconds)
            raise FlowError(failure.message) from (None if exc is failure else exc)
        self._set(event.deployment_id, status="running", error=None)
        seconds = time.monotonic() - started
        target.log.note(f"running after {seconds:.1f}s")
        self._comment(event, comment_id, comments.ready(record.url, event.commit_sha, seconds))
        self._report(event, reported, "success", f"Preview of {event.commit_sha[:7] if event.commit_sha else ''} "
                     "running", environment_url=record.url)
        self._count_deploy(event.deployment_id, "success", seconds)
        log.info("preview running at %s", record.url, extra=extra)

    def _build_and_start(self, event: PullRequestEvent, target: Target, record: DeploymentRecord,
                         route_served: bool) -> None:
        self._checkout(event, target)
        try:
            config = load_checkout_config(self.plugins, target.work_dir)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        self._set(event.deployment_id, framework=config.framework, dbType=config.database,
                  appPort=config.app_port)
        for command in config.build_commands:
            try:
                run(["sh", "-c", command], cwd=target.work_dir, env=clean_env(home=target.work_dir),
                    timeout=self.settings.build_command_timeout_seconds, log=target.log)
            except CommandFailed as exc:
                raise StepFailed(f"Build command failed: {command[:200]}", exc.tail()) from None
        context = make_context(event.repo_owner, event.repo_name, event.pr_number, record.exposedAppPort,
                               record.exposedDbPort, self.settings.codehost_webhook_secret.get_secret_value().encode(),
                               self.settings.image_overrides)
        try:
            rendered = render_deployment(self.plugins, target.work_dir, config, context)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        try:
            compose_file = write_rendered(target.work_dir, rendered)
        except OSError as exc:
            raise StepFailed(f"Work directory cannot be written: {exc.strerror}") from None
        try:
            self.compose.build(event.deployment_id, compose_file, target.log)
        except CommandFailed as exc:
            raise StepFailed("Docker build failed", exc.tail()) from None
        try:
            self.compose.up(event.deployment_id, compose_file, target.log)
        except CommandFailed as exc:
            raise StepFailed("Containers failed to start", exc.tail()) from None
        url = f"http://127.0.0.1:{record.exposedAppPort}{config.health_check_path}"
        probing = time.monotonic()
        healthy = wait_healthy(url, self.settings.health_check_interval_seconds,
                               self.settings.health_check_timeout_seconds, target.log)
        self.metrics.health_seconds.labels("healthy" if healthy else "timeout").observe(time.monotonic() - probing)
        if not healthy:
            raise StepFailed("Health check timeout", self._container_logs(event.deployment_id, compose_file))
        try:
            self.proxy.install(target.slug, target.pr, event.deployment_id, record.exposedAppPort, target.log,
                               served=route_served)
        except ProxyError as exc:
            raise StepFailed("Nginx reload failed", str(exc)) from None

    def _checkout(self, event: PullRequestEvent, target: Target) -> None:
        if not event.clone_url or not event.branch or not event.commit_sha:
            raise StepFailed("The pull request has no clone URL, branch or commit to deploy")
        try:
            if (target.work_dir / ".git").is_dir():
                self.git.checkout(event.clone_url, event.branch, event.commit_sha, target.work_dir, target.log)
            else:
                if target.work_dir.exists():
                    shutil.rmtree(target.work_dir)
                self.git.clone(event.clone_url, event.branch, event.commit_sha, target.work_dir, target.log)
        except CloneRefused as exc:
            raise StepFailed(str(exc)) from None
        except CommandFailed as exc:
            raise StepFailed("Git clone or checkout failed", exc.tail()) from None
        except OSError as exc:
            raise StepFailed(f"Work directory cannot be written: {exc.strerror}") from None

    def _begin(self, event: PullRequestEvent, comment_id: int | None) -> DeploymentRecord:
        """Atomically: check the limit, keep or allocate ports, and record the deployment as building."""
        # Asking Docker which ports are published takes a moment; an update keeps its ports and skips it.
        kept = event.deployment_id in self.store.read().portAllocations
        in_use: set[int] = set() if kept else _safe(published_host_ports, set())
        now = datetime.now(UTC)

        def change(data: StoreFile) -> DeploymentRecord:
            previous = data.deployments.get(event.deployment_id)
            allocation = data.portAllocations.get(event.deployment_id)
            if previous is None and len(data.deployments) >= self.settings.max_concurrent_previews:
                raise PortAllocationError(self._limit_message())
            if allocation is None:
                others = [a for key, a in data.portAllocations.items() if key != event.deployment_id]
                allocation = allocate(event.pr_number, others, in_use)
                data.portAllocations[event.deployment_id] = allocation
            record = DeploymentRecord(
                prNumber=event.pr_number, repoName=event.repo_name, repoOwner=event.repo_owner,
                projectSlug=event.project_slug, deploymentId=event.deployment_id, branch=event.branch or "",
                commitSha=event.commit_sha or "", framework=previous.framework if previous else None,
                dbType=previous.dbType if previous else None, appPort=previous.appPort if previous else None,
                exposedAppPort=allocation.exposedAppPort, exposedDbPort=allocation.exposedDbPort,
                status="building", createdAt=previous.createdAt if previous else now, updatedAt=now,
                url=self._url(event.project_slug, event.pr_number),
                commentId=comment_id if comment_id is not None else (previous.commentId if previous else None),
                cloneUrl=event.clone_url, error=None,
            )
            data.deployments[event.deployment_id] = record
            return record

        return self.store.update(change)

    def _fail(self, event: PullRequestEvent, target: Target, comment_id: int | None, failure: StepFailed,
              seconds: float) -> None:
        log.error("%s", failure.message, extra={"deploymentId": event.deployment_id})
        target.log.note(f"FAILED: {failure.message}")
        try:
            self._set(event.deployment_id, status="failed", error=failure.message)
        except Exception:  # noqa: BLE001 - the failure comment still goes out
            log.exception("could not record the failure", extra={"deploymentId": event.deployment_id})
        try:
            self.compose.stop(event.deployment_id, target.log)
        except CommandFailed as exc:
            log.warning("could not stop containers: %s", exc, extra={"deploymentId": event.deployment_id})
        self._comment(event, comment_id, comments.failed(failure.message, event.commit_sha,
                                                         self._mask(failure.detail), seconds))

    # Cleanup -----------------------------------------------------------------------------------

    def cleanup(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> None:
        """Remove everything of a deployment, going on past failures; fail only if something is left."""
        target = self.target(event.project_slug, event.pr_number, event.deployment_id)
        extra = {"deploymentId": event.deployment_id}
        problems: list[str] = []
        compose_file = next((target.work_dir / name for name in (REPO_COMPOSE_OUTPUT, GENERATED_COMPOSE)
                             if (target.work_dir / name).is_file()), None)
        try:
            self.compose.down(event.deployment_id, compose_file, None)
        except CommandFailed as exc:
            log.warning("compose down failed (%s); removing by label", exc, extra=extra)
        problems += remove_labelled(event.deployment_id, None)
        try:
            if target.work_dir.exists():
                shutil.rmtree(target.work_dir)
            target.log.path.unlink(missing_ok=True)
        except OSError as exc:
            problems.append(f"work directory: {exc.strerror}")
        try:
            # A running preview had a route nginx may still serve, even if a crash already deleted its file.
            self.proxy.remove(target.slug, target.pr, None,
                              reload_anyway=existing is not None and existing.status == "running")
        except ProxyError as exc:
            problems.append(f"proxy: {exc}")

        def forget(data: StoreFile) -> None:
            data.deployments.pop(event.deployment_id, None)
            data.portAllocations.pop(event.deployment_id, None)

        self.store.update(forget)
        leftovers = [kind for kind in ("container", "volume", "network")
                     if _safe(lambda kind=kind: labelled(kind, event.deployment_id), {})]
        problems += [f"{kind}s still present" for kind in leftovers]
        if existing is not None and existing.commentId is not None:
            self._comment(event, existing.commentId, comments.removed())
        if existing is not None and existing.codehostDeploymentId is not None:
            self._report(event, existing.codehostDeploymentId, "inactive", "Preview removed")
        self.metrics.cleanups.labels("failure" if problems else "success").inc()
        if problems:
            for problem in problems:
                log.error("cleanup: %s", problem, extra=extra)
            raise FlowError("Cleanup incomplete: " + "; ".join(problems))
        log.info("cleaned up", extra=extra)

    # Start-up reconciliation and the TTL ----------------------------------------------------------

    def startup(self, open_deployments: set[str]) -> None:
        """After a crash: settle records left building, and remove what has no record."""
        data = self.store.read()
        for deployment_id, record in data.deployments.items():
            if record.status == "building" and deployment_id not in open_deployments:
                self._set(deployment_id, status="failed", error=INTERRUPTED)
                log.warning("left building by a restart; marked failed", extra={"deploymentId": deployment_id})
        known = set(data.deployments) | open_deployments
        orphans = {dep for kind in ("container", "volume", "network")
                   for dep in _safe(lambda kind=kind: labelled(kind), {}).values()} - known
        for deployment_id in sorted(orphans):
            log.warning("removing resources with no record", extra={"deploymentId": deployment_id})
            remove_labelled(deployment_id, None)
        routes = {f"{r.projectSlug}-pr-{r.prNumber}.conf" for r in data.deployments.values()}
        stale = [p for p in self.settings.proxy_config_dir.glob("*-pr-*.conf") if p.name not in routes]
        for path in stale:
            path.unlink(missing_ok=True)
        if stale:
            _safe(lambda: self.proxy.reload(None), None)
        dirs = {(r.projectSlug, f"pr-{r.prNumber}") for r in data.deployments.values()}
        dirs |= {(d.rsplit("-", 1)[0], f"pr-{d.rsplit('-', 1)[1]}") for d in open_deployments}
        root = self.settings.deployments_dir
        for work in root.glob("*/pr-*") if root.is_dir() else []:
            if work.is_dir() and (work.parent.name, work.name) not in dirs:
                log.warning("removing work directory %s with no record", work)
                shutil.rmtree(work, ignore_errors=True)
                (work.parent / f"{work.name}.log").unlink(missing_ok=True)

    def expired(self, now: datetime) -> list[DeploymentRecord]:
        """Previews whose last deploy or update (`updatedAt`) is older than CLEANUP_TTL_DAYS."""
        if self.settings.cleanup_ttl_days == 0:
            return []
        cutoff = now - timedelta(days=self.settings.cleanup_ttl_days)
        return [r for r in self.store.read().deployments.values() if r.updatedAt < cutoff]

    # Helpers -----------------------------------------------------------------------------------

    def _set(self, deployment_id: str, touch: bool = True, **fields: object) -> None:
        """Update fields of a record if it still exists; `touch` also moves `updatedAt` (the TTL's clock)."""
        def change(data: StoreFile) -> None:
            record = data.deployments.get(deployment_id)
            if record is not None:
                update = {**fields, "updatedAt": datetime.now(UTC)} if touch else fields
                data.deployments[deployment_id] = record.model_copy(update=update)

        self.store.update(change)

    def _comment(self, event: PullRequestEvent, comment_id: int | None, body: str) -> int | None:
        try:
            new_id = self.codehost.upsert_comment(event.repo_owner, event.repo_name, event.pr_number,
                                                  comment_id, body)
        except (CodeHostError, ValueError, KeyError) as exc:
            log.warning("comment not posted: %s", exc, extra={"deploymentId": event.deployment_id})
            return comment_id
        if new_id != comment_id:
            self._set(event.deployment_id, touch=False, commentId=new_id)
        return new_id

    def _report_start(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> int | None:
        """A code-host deployment for this commit, `in_progress`; the previous commit's becomes inactive."""
        if not self.settings.codehost_deployments or not event.commit_sha:
            return None
        environment = f"preview/{event.project_slug}/pr-{event.pr_number}"
        try:
            new_id = self.codehost.create_deployment(event.repo_owner, event.repo_name, event.commit_sha,
                                                     environment, f"Preview of pull request #{event.pr_number}")
        except (CodeHostError, ValueError, KeyError) as exc:
            log.warning("deployment not reported: %s", exc, extra={"deploymentId": event.deployment_id})
            return None
        self._set(event.deployment_id, touch=False, codehostDeploymentId=new_id)
        previous = existing.codehostDeploymentId if existing else None
        if previous is not None and previous != new_id:
            self._report(event, previous, "inactive", "Superseded by a newer commit")
        self._report(event, new_id, "in_progress", "Building the preview")
        return new_id

    def _report(self, event: PullRequestEvent, deployment: int | None, state: str, description: str,
                environment_url: str | None = None) -> None:
        if deployment is None or not self.settings.codehost_deployments:
            return
        try:
            self.codehost.set_deployment_status(event.repo_owner, event.repo_name, deployment, state, description,
                                                environment_url=environment_url)
        except (CodeHostError, ValueError, KeyError) as exc:
            log.warning("deployment status %s not reported: %s", state, exc,
                        extra={"deploymentId": event.deployment_id})

    def _count_deploy(self, deployment_id: str, result: str, seconds: float) -> None:
        record = self.store.read().deployments.get(deployment_id)
        framework = record.framework if record and record.framework else "unknown"
        self.metrics.deploys.labels(framework, result).inc()
        self.metrics.deploy_seconds.labels(result).observe(seconds)

    def _at_limit(self, deployment_id: str) -> bool:
        deployments = self.store.read().deployments
        return deployment_id not in deployments and len(deployments) >= self.settings.max_concurrent_previews

    def _limit_message(self) -> str:
        return (f"Preview limit reached: {self.settings.max_concurrent_previews} previews exist "
                "(MAX_CONCURRENT_PREVIEWS); close another pull request, then push again")

    def _url(self, slug: str, pr: int) -> str:
        return f"{self.settings.preview_base_url or 'http://localhost'}/{slug}/pr-{pr}/"

    def _container_logs(self, project: str, compose_file: Path) -> str:
        try:
            output = self.compose.logs(project, compose_file, "app", tail=20)
        except CommandFailed as exc:
            return exc.tail()
        return "\n".join(output.splitlines()[-20:])

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _safe(function, default):  # noqa: ANN001, ANN202
    """Docker or the proxy being unavailable must not stop start-up or a cleanup's other steps."""
    try:
        return function()
    except (CommandFailed, OSError) as exc:
        log.warning("%s", exc)
        return default
