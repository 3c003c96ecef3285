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
from orchestrator.build_commands import BuildCommandError, BuildCommands
from orchestrator.checkout import load_checkout_config
from orchestrator.checkout_paths import UnsafeCheckout, check_links
from orchestrator.codehost import CodeHost, CodeHostError
from orchestrator.commands import CommandFailed, DeploymentLog, deployment_log_path
from orchestrator.docker_compose import OWNER_LABEL, Compose, DockerResources
from orchestrator.flow_control import FlowAborted, FlowControl, unlimited
from orchestrator.git_ops import CloneRefused, Git
from orchestrator.handler import FlowError
from orchestrator.health import wait_healthy
from orchestrator.host_env import HostEnv
from orchestrator.leftovers import stop_marked_processes
from orchestrator.metrics import Metrics
from orchestrator.models import (
    DeploymentRecord,
    PullRequestEvent,
    StoreFile,
    event_for_record,
    foreign_repository_message,
)
from orchestrator.plugin_host import PluginHost, build_plugin_host
from orchestrator.ports import MAX_PR_NUMBER, OUT_OF_RANGE, PortAllocationError, allocate
from orchestrator.preview_config import ConfigError
from orchestrator.proxy import Proxy, ProxyError
from orchestrator.rendering import (
    GENERATED_COMPOSE,
    REPO_COMPOSE_OUTPUT,
    RenderedDeployment,
    main_process,
    make_context,
    render_deployment,
    rewrite_compose,
    with_startup,
    write_rendered,
)
from orchestrator.settings import Settings
from orchestrator.state_secrets import random_key, read_or_create
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
    git_dir: Path  # beside the work directory: nothing a preview can see
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
        self.env = HostEnv.for_state_dir(settings.state_dir)
        self.git = Git(settings.codehost_token.get_secret_value(), settings.codehost_api_url,
                       settings.allowed_clone_protocols, settings.git_timeout_seconds, self.env)
        self.compose = Compose(settings.compose_timeout_seconds, self.env)
        self.docker = DockerResources(self.env)
        self.proxy = Proxy(settings.proxy_config_dir, settings.proxy_test_command, settings.proxy_reload_command,
                           self.env)
        self.build_commands = BuildCommands(settings.build_commands_mode, settings.build_command_timeout_seconds,
                                            self.env, settings.build_commands_user,
                                            lambda image: settings.image_overrides.get(image, image))
        self._secrets = settings.secret_values()
        self._password_key: bytes | None = None

    # Entry point -----------------------------------------------------------------------------

    def handle(self, event: PullRequestEvent, control: FlowControl | None = None) -> None:
        control = control or unlimited()
        existing = self.store.read().deployments.get(event.deployment_id)
        if existing is not None and not existing.belongs_to(event):
            raise FlowError(foreign_repository_message(event.deployment_id, existing.repoOwner, existing.repoName))
        if event.action != "closed" and event.from_fork and not self.settings.allow_fork_prs:
            self._refuse_fork(event)
            return
        if event.action == "closed":
            self.cleanup(event, existing)
        else:
            self.deploy(event, existing, control)  # a preview that exists is updated in place

    def _refuse_fork(self, event: PullRequestEvent) -> None:
        """Forks run code from outside the team: one comment on opening, nothing recorded, nothing run."""
        log.info("pull request from fork %s not deployed", event.head_repo_full_name,
                 extra={"deploymentId": event.deployment_id})
        if event.action in ("opened", "reopened"):
            self._refuse(event, (
                "Pull requests from forks are not deployed: their code would run on the preview host. "
                "A maintainer can push the branch to this repository, or the operator can set ALLOW_FORK_PRS=true."
            ))

    def target(self, slug: str, pr: int, deployment_id: str) -> Target:
        root = self.settings.deployments_dir.resolve()
        work = (root / slug / f"pr-{pr}").resolve()
        if not work.is_relative_to(root) or work == root:
            raise FlowError("Invalid deployment path")
        return Target(deployment_id, slug, pr, work, work.with_name(f"pr-{pr}.git"),
                      DeploymentLog(deployment_log_path(root, slug, pr)))

    # Deploy and update -------------------------------------------------------------------------

    def deploy(self, event: PullRequestEvent, existing: DeploymentRecord | None,
               control: FlowControl | None = None) -> None:
        control = control or unlimited()
        started = time.monotonic()
        target = self.target(event.project_slug, event.pr_number, event.deployment_id)
        extra = {"deploymentId": event.deployment_id}
        updating = existing is not None
        if not updating and (refusal := self._refusal(event)):
            self._refuse(event, refusal)
            raise FlowError(refusal)
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
            self._build_and_start(event, target, record, control, route_served=existing is not None
                                  and existing.status == "running")
        except FlowAborted as exc:
            self._abort(event, target, comment_id, reported, exc, time.monotonic() - started)
            raise FlowError(exc.message) from None
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
                         control: FlowControl, route_served: bool) -> None:
        self._checkout(event, target, control)
        try:
            config = load_checkout_config(self.plugins, target.work_dir)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        self._set(event.deployment_id, framework=config.framework, dbType=config.database,
                  appPort=config.app_port)
        framework = self.plugins.provided.frameworks[config.framework]
        try:
            self.build_commands.run_all(config.build_commands, target.work_dir, event.deployment_id,
                                        framework.toolchain_image, target.log, control)
        except BuildCommandError as exc:
            raise StepFailed(exc.message, exc.detail) from None
        try:
            # After build_commands too: they may have created links. Compose and the renderer read the checkout.
            check_links(target.work_dir)
        except UnsafeCheckout as exc:
            raise StepFailed(str(exc)) from None
        context = make_context(event.repo_owner, event.repo_name, event.pr_number, record.exposedAppPort,
                               record.exposedDbPort, self.password_key(), self.settings.image_overrides)
        try:
            rendered = render_deployment(self.plugins, target.work_dir, config, context, self.compose.normalized)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        except CommandFailed as exc:
            raise StepFailed("docker compose could not read the compose file", exc.tail()) from None
        try:
            compose_file = write_rendered(target.work_dir, rendered)
        except OSError as exc:
            raise StepFailed(f"Work directory cannot be written: {exc.strerror}") from None
        try:
            self.compose.build(event.deployment_id, compose_file, target.log, control)
        except CommandFailed as exc:
            raise StepFailed("Docker build failed", exc.tail()) from None
        if rendered.pending_startup is not None:
            compose_file = self._startup_before_main(event, target, rendered, compose_file, control)
        try:
            self.compose.up(event.deployment_id, compose_file, target.log, control)
        except CommandFailed as exc:
            raise StepFailed("Containers failed to start", exc.tail()) from None
        url = f"http://127.0.0.1:{record.exposedAppPort}{config.health_check_path}"
        probing = time.monotonic()
        healthy = wait_healthy(url, self.settings.health_check_interval_seconds,
                               self.settings.health_check_timeout_seconds, target.log, control)
        self.metrics.health_seconds.labels("healthy" if healthy else "timeout").observe(time.monotonic() - probing)
        if not healthy:
            raise StepFailed("Health check timeout", self._container_logs(event.deployment_id, compose_file))
        try:
            self.proxy.install(target.slug, target.pr, event.deployment_id, record.exposedAppPort, target.log,
                               served=route_served)
        except ProxyError as exc:
            raise StepFailed("Nginx reload failed", str(exc)) from None

    def _startup_before_main(self, event: PullRequestEvent, target: Target, rendered: RenderedDeployment,
                             compose_file: Path, control: FlowControl) -> Path:
        """startup_commands, then the image's own ENTRYPOINT and CMD (a repository that works with `docker run`
        works as a preview): read from the built (or pulled) image, written into the compose file."""
        pending = rendered.pending_startup
        assert pending is not None
        try:
            try:
                entrypoint, cmd = self.docker.image_command(pending.image)
            except CommandFailed:  # an `image:` the build did not make: compose pulls it
                self.compose.pull(event.deployment_id, compose_file, "app", target.log, control)
                entrypoint, cmd = self.docker.image_command(pending.image)
        except CommandFailed as exc:
            raise StepFailed("The app image's entrypoint could not be read", exc.tail()) from None
        main = main_process(pending, entrypoint, cmd)
        if not main:
            raise StepFailed("The app image has no ENTRYPOINT or CMD to run after startup_commands")
        target.log.note(f"startup_commands, then the image's main process: {main}")
        return rewrite_compose(target.work_dir, with_startup(rendered, pending.commands, main))

    def _checkout(self, event: PullRequestEvent, target: Target, control: FlowControl) -> None:
        if not event.clone_url or not event.branch or not event.commit_sha:
            raise StepFailed("The pull request has no clone URL, branch or commit to deploy")
        try:
            if self.git.has_checkout(target.work_dir, target.git_dir):
                self.git.checkout(event.clone_url, event.branch, event.commit_sha, target.work_dir,
                                  target.git_dir, target.log, control, local=event.local)
            else:
                _remove_tree(target.work_dir)  # a partial clone, or a checkout of the old layout (.git inside)
                _remove_tree(target.git_dir)
                target.work_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
                self.git.clone(event.clone_url, event.branch, event.commit_sha, target.work_dir, target.git_dir,
                               target.log, control, local=event.local)
            for private in (target.work_dir, target.git_dir):
                private.chmod(0o700)  # a build user (BUILD_COMMANDS_MODE=host) of another preview must not read it
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
        in_use: set[int] = set() if kept else _safe(self.docker.published_host_ports, set())
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
                url=self.settings.preview_url(event.project_slug, event.pr_number),
                commentId=comment_id if comment_id is not None else (previous.commentId if previous else None),
                cloneUrl=event.clone_url, error=None, source=event.source,
            )
            data.deployments[event.deployment_id] = record
            return record

        return self.store.update(change)

    def _fail(self, event: PullRequestEvent, target: Target, comment_id: int | None, failure: StepFailed,
              seconds: float) -> None:
        log.error("%s", failure.message, extra={"deploymentId": event.deployment_id})
        target.log.note(f"FAILED: {failure.message}")
        self._settle_failed(event.deployment_id, failure.message, target.log)
        self._comment(event, comment_id, comments.failed(failure.message, event.commit_sha,
                                                         self._mask(failure.detail), seconds))

    def _abort(self, event: PullRequestEvent, target: Target, comment_id: int | None, reported: int | None,
               aborted: FlowAborted, seconds: float) -> None:
        """Out of time: a failure like any other. Cancelled (the pull request closed, or a DELETE): the cleanup
        queued behind this flow removes everything, so the comment and the code host are left to it."""
        if not aborted.cancelled:
            self._fail(event, target, comment_id, StepFailed(aborted.message), seconds)
            self._report(event, reported, "failure", aborted.message)
            self._count_deploy(event.deployment_id, "failure", seconds)
            return
        log.info("%s", aborted.message, extra={"deploymentId": event.deployment_id})
        target.log.note(aborted.message)
        self._settle_failed(event.deployment_id, aborted.message, target.log)

    def _settle_failed(self, deployment_id: str, message: str, deployment_log: DeploymentLog) -> None:
        try:
            self._set(deployment_id, status="failed", error=message)
        except Exception:  # noqa: BLE001 - the failure comment still goes out
            log.exception("could not record the failure", extra={"deploymentId": deployment_id})
        try:
            self.compose.stop(deployment_id, deployment_log)
        except CommandFailed as exc:
            log.warning("could not stop containers: %s", exc, extra={"deploymentId": deployment_id})

    # Cleanup -----------------------------------------------------------------------------------

    def cleanup(self, event: PullRequestEvent, existing: DeploymentRecord | None) -> None:
        """Remove everything of a deployment, going on past failures. The record and its ports are forgotten
        only once nothing is left; otherwise the record stays (failed, with what is left) for a retry."""
        target = self.target(event.project_slug, event.pr_number, event.deployment_id)
        extra = {"deploymentId": event.deployment_id}
        problems: list[str] = []
        compose_file = next((target.work_dir / name for name in (REPO_COMPOSE_OUTPUT, GENERATED_COMPOSE)
                             if (target.work_dir / name).is_file()), None)
        try:
            self.compose.down(event.deployment_id, compose_file, None)
        except CommandFailed as exc:
            log.warning("compose down failed (%s); removing by label", exc, extra=extra)
        problems += self.docker.remove_labelled(event.deployment_id, None)
        try:
            _remove_tree(target.work_dir)
            _remove_tree(target.git_dir)
            target.log.path.unlink(missing_ok=True)
        except OSError as exc:
            problems.append(f"work directory: {exc.strerror}")
        try:
            # nginx may still serve a tracked preview's route even when its file is gone (a crash, or an earlier
            # cleanup whose reload failed), so a tracked preview's cleanup always reloads.
            self.proxy.remove(target.slug, target.pr, None, reload_anyway=existing is not None)
        except ProxyError as exc:
            problems.append(f"proxy: {exc}")
        leftovers = [kind for kind in ("container", "volume", "network")
                     if _safe(lambda kind=kind: self.docker.labelled(kind, event.deployment_id), {})]
        problems += [f"{kind}s still present" for kind in leftovers]
        self.metrics.cleanups.labels("failure" if problems else "success").inc()
        if problems:
            message = "Cleanup incomplete: " + "; ".join(problems)
            for problem in problems:
                log.error("cleanup: %s", problem, extra=extra)
            self._set(event.deployment_id, touch=False, status="failed", error=message)
            raise FlowError(message)

        def forget(data: StoreFile) -> None:
            data.deployments.pop(event.deployment_id, None)
            data.portAllocations.pop(event.deployment_id, None)

        self.store.update(forget)
        if existing is not None and existing.commentId is not None:
            self._comment(event, existing.commentId, comments.removed())
        if existing is not None and existing.codehostDeploymentId is not None:
            self._report(event, existing.codehostDeploymentId, "inactive", "Preview removed")
        log.info("cleaned up", extra=extra)

    # Start-up reconciliation and the TTL ----------------------------------------------------------

    def startup(self, open_deployments: set[str]) -> None:
        """After a crash: stop what the last run left running, settle records left building, and remove what
        has no record."""
        stop_marked_processes(self.env.marker)
        _safe(lambda: self.docker.remove_containers(f"{OWNER_LABEL}={self.env.marker}"), [])
        data = self.store.read()
        for deployment_id, record in data.deployments.items():
            if record.status == "building" and deployment_id not in open_deployments:
                self._settle_interrupted(record)
        known = set(data.deployments) | open_deployments
        orphans = {dep for kind in ("container", "volume", "network")
                   for dep in _safe(lambda kind=kind: self.docker.labelled(kind), {}).values()} - known
        for deployment_id in sorted(orphans):
            log.warning("removing resources with no record", extra={"deploymentId": deployment_id})
            self.docker.remove_labelled(deployment_id, None)
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
            name = work.name.removesuffix(".git")
            if work.is_dir() and (work.parent.name, name) not in dirs:
                log.warning("removing work directory %s with no record", work)
                shutil.rmtree(work, ignore_errors=True)
                (work.parent / f"{name}.log").unlink(missing_ok=True)

    def _settle_interrupted(self, record: DeploymentRecord) -> None:
        """A deploy a crash cut short: failed, and the pull request's comment and deployment say so."""
        self._set(record.deploymentId, status="failed", error=INTERRUPTED)
        log.warning("left building by a restart; marked failed", extra={"deploymentId": record.deploymentId})
        event = event_for_record(record, "synchronize", f"restart-{record.deploymentId}")
        if record.commentId is not None:
            self._comment(event, record.commentId, comments.failed(INTERRUPTED, record.commitSha))
        self._report(event, record.codehostDeploymentId, "failure", INTERRUPTED)

    def expired(self, now: datetime) -> list[DeploymentRecord]:
        """Previews whose last deploy or update (`updatedAt`) is older than CLEANUP_TTL_DAYS."""
        if self.settings.cleanup_ttl_days == 0:
            return []
        cutoff = now - timedelta(days=self.settings.cleanup_ttl_days)
        return [r for r in self.store.read().deployments.values() if r.updatedAt < cutoff]

    # Helpers -----------------------------------------------------------------------------------

    def password_key(self) -> bytes:
        """The key of the database passwords (state_secrets.py); read once, created on first need."""
        if self._password_key is None:
            has_previews = bool(self.store.read().deployments)
            secret = self.settings.codehost_webhook_secret.get_secret_value().encode()
            self._password_key = read_or_create(self.settings.db_password_key_path,
                                                lambda: secret if has_previews else random_key())
        return self._password_key

    def _set(self, deployment_id: str, touch: bool = True, **fields: object) -> None:
        """Update fields of a record if it still exists; `touch` also moves `updatedAt` (the TTL's clock)."""
        def change(data: StoreFile) -> None:
            record = data.deployments.get(deployment_id)
            if record is not None:
                update = {**fields, "updatedAt": datetime.now(UTC)} if touch else fields
                data.deployments[deployment_id] = record.model_copy(update=update)

        self.store.update(change)

    def _refusal(self, event: PullRequestEvent) -> str | None:
        """Why a new preview cannot be made at all, before anything is touched."""
        if event.pr_number > MAX_PR_NUMBER:
            return OUT_OF_RANGE
        deployments = self.store.read().deployments
        if event.deployment_id not in deployments and len(deployments) >= self.settings.max_concurrent_previews:
            return self._limit_message()
        return None

    def _refuse(self, event: PullRequestEvent, message: str) -> None:
        """One comment per pull request, also for refusals: there is no record to remember it, so the service's
        earlier comment is looked up on the code host and edited."""
        if event.local:
            return
        try:
            existing = self.codehost.find_marked_comment(event.repo_owner, event.repo_name, event.pr_number,
                                                         comments.MARKER)
        except (CodeHostError, ValueError, KeyError) as exc:
            log.warning("comments not listed: %s", exc, extra={"deploymentId": event.deployment_id})
            existing = None
        self._comment(event, existing, comments.refused(message))

    def _comment(self, event: PullRequestEvent, comment_id: int | None, body: str) -> int | None:
        if event.local:
            return None  # no pull request to comment on
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
        if not self.settings.codehost_deployments or not event.commit_sha or event.local:
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

    def _limit_message(self) -> str:
        return (f"Preview limit reached: {self.settings.max_concurrent_previews} previews exist "
                "(MAX_CONCURRENT_PREVIEWS); close another pull request, then push again")

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


def _remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _safe(function, default):  # noqa: ANN001, ANN202
    """Docker or the proxy being unavailable must not stop start-up or a cleanup's other steps."""
    try:
        return function()
    except (CommandFailed, OSError) as exc:
        log.warning("%s", exc)
        return default

