"""The steps of a deploy or update, in order: checkout, preview-config.yml, build_commands, render, build,
startup_commands' main process, start, health, route. Each step turns its adapter's failure into StepFailed with
the spec's message."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.adapters.build_commands import BuildCommandError
from orchestrator.adapters.commands import CommandFailed
from orchestrator.adapters.git import CloneRefused
from orchestrator.adapters.health import AppStopped, wait_healthy
from orchestrator.adapters.nginx import FlagUnseen, ProxyError
from orchestrator.common.checkout_paths import UnsafeCheckout, check_links, inside, remove_tree
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.naming import CODEHOST, branch_problem, mirror_name
from orchestrator.common.path_glob import matching
from orchestrator.common.text_table import printable
from orchestrator.flows.context import FlowContext, StepFailed, Target
from orchestrator.flows.error_lines import with_pull_error
from orchestrator.flows.records import set_fields
from orchestrator.flows.stages import StageClock
from orchestrator.plugin_api.preview_config import ConfigError, PreviewConfig
from orchestrator.plugin_api.runtime import RuntimeFailure, SeedFailed
from orchestrator.plugin_api.types import DataSeed, RenderContext
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import (
    RenderedDeployment,
    main_process,
    make_context,
    render_deployment,
    rewrite_compose,
    with_startup,
    write_rendered,
)
from orchestrator.state.records import DeploymentRecord, PullRequestEvent

TAIL = 40  # lines of the app's output in a failure comment (the error line is shown above them)
OUTPUT_LINES = 200  # of each container, into the deployment log
OUTPUT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Built:
    """A deploy whose steps all passed: the seconds of each stage, and the compose file the preview runs."""

    stages: dict[str, float]
    compose_file: Path
    migrations: list[str] = field(default_factory=list)  # the migration files the pull request changes


class BuildSteps:
    def __init__(self, context: FlowContext) -> None:
        self.c = context

    def run(self, event: PullRequestEvent, target: Target, record: DeploymentRecord, control: FlowControl,
            route_served: bool) -> Built:
        """Every step, each timed (StageClock). The containers' output of a preview that came up is kept by the
        caller once the preview is `running` (`keep_output`): beside the route it took CPU nginx's reload needed."""
        clock = StageClock(target.log, self.c.metrics)
        with clock.stage("checkout"):
            self.checkout(event, target, control)
            config = self.configure(event, target)
        with ThreadPoolExecutor(1, thread_name_prefix="migrations") as looking:
            migrations = looking.submit(self.migrations, event, target, config, control)
            stages, compose_file = self._build(event, target, record, control, route_served, clock, config)
        return Built(stages, compose_file, migrations.result())

    def _build(self, event: PullRequestEvent, target: Target, record: DeploymentRecord, control: FlowControl,
               route_served: bool, clock: StageClock, config: PreviewConfig) -> tuple[dict[str, float], Path]:
        with clock.stage("build_commands"):
            self.build_commands(event, target, config, control)
        with clock.stage("render"):
            rendered, compose_file = self.render(event, target, record, config)
            data = self.data_seed(event, target, config, rendered)
        with ThreadPoolExecutor(1, thread_name_prefix="route") as pool:
            prepared = None
            if (address := self.c.runtime.app_address_before_start(record.exposedAppPort)) is not None:
                prepared = pool.submit(self.prepare_route, event, target, address, route_served, control)
            try:
                compose_file = self.build_and_start(event, target, rendered, compose_file, control, clock, data)
                with clock.stage("health"):
                    self.wait_healthy(event, target, record, config, compose_file, control)
                with clock.stage("route"):
                    self.route(event, target, record, route_served, control, prepared)
            except BaseException:
                if prepared is not None and not route_served:
                    self.remove_prepared_route(target, prepared)
                raise
        return clock.seconds, compose_file

    def migrations(self, event: PullRequestEvent, target: Target, config: PreviewConfig,
                   control: FlowControl) -> list[str]:
        """The files where the framework keeps migrations (po_migrations) that the pull request changes since its
        base branch; none when it has no base or git cannot tell (the log says why). Beside the build."""
        patterns = self.c.plugins.migrations(config.framework)
        if not patterns or not event.base_ref or branch_problem(event.base_ref) or not event.clone_url:
            return []
        # A fork's `origin` is the fork: its base branch is the fork's, the author's to move.
        if known_fork(event):
            target.log.note("migrations not looked for: the pull request comes from a fork")
            return []
        try:
            changed = self.c.git.changed_since(event.clone_url, event.base_ref, target.work_dir, target.git_dir,
                                               target.log, control, local=event.local, codehost=event.codehost)
        except (CommandFailed, OSError) as exc:
            target.log.note(f"migrations not looked for: the changes since {event.base_ref} are unknown ({exc})")
            return []
        found = matching(changed, patterns)
        if found:
            target.log.note(f"{len(found)} migration file(s) changed since {event.base_ref}: "
                            f"{printable(', '.join(found[:10]))}")
        return found

    def build_and_start(self, event: PullRequestEvent, target: Target, rendered: RenderedDeployment,
                        compose_file: Path, control: FlowControl, clock: StageClock,
                        data: DataSeed | None = None) -> Path:
        """Build the images while the database and extra services start (they need no build; a repository's
        seed is restored meanwhile, when it is new), then start."""
        runtime = self.c.runtime

        def dependencies() -> None:
            if rendered.seed is not None:  # a new preview's database volume from a seed, where the runtime can
                if data is not None and not runtime.restores_seeds:
                    raise SeedFailed(f"The {runtime.name} runtime cannot restore a database seed")
                runtime.seed_database(event.deployment_id, compose_file, rendered.seed, target.log, control,
                                      data=data)
            runtime.start_dependencies(event.deployment_id, compose_file, target.log, control)

        with ThreadPoolExecutor(1, thread_name_prefix="dependencies") as pool:
            early = pool.submit(dependencies)
            try:
                with clock.stage("build"):
                    runtime.build(event.deployment_id, compose_file, target.log, control)
                    if rendered.pending_startup is not None:
                        compose_file = self.startup_before_main(event, target, rendered, compose_file, control)
            except RuntimeFailure as exc:
                raise StepFailed(with_pull_error(exc.message, exc.detail), exc.detail) from None
            finally:
                failed = early.exception()
                if failed is not None and not isinstance(failed, SeedFailed):  # `start` below starts them, or
                    target.log.note(f"early start of the dependencies failed: {failed}")  # says why not
        if isinstance(failed, SeedFailed):  # never an empty database in place of the repository's data
            raise StepFailed(failed.message, failed.detail)
        with clock.stage("start"):
            try:
                runtime.start(event.deployment_id, compose_file, target.log, control)
            except RuntimeFailure as exc:  # an image: compose pulls
                raise StepFailed(with_pull_error(exc.message, exc.detail), exc.detail) from None
        return compose_file

    def prepare_route(self, event: PullRequestEvent, target: Target, address: tuple[str, int],
                      route_served: bool, control: FlowControl) -> bool:
        """The route written and loaded while the app builds — a new preview's closed (404, as if it did not exist)
        until `route` opens it once the app is healthy, and seen loaded here, so that nginx's reload and its old
        workers are off the way to `running`. True when this deploy loaded it (the route step opens it; a failure
        removes it); False when it could not: the route step writes it then, and fails with nginx's own reason."""
        host, port = address
        if not route_served and not self.c.proxy.flags_usable():
            return False  # it could not be loaded closed (the log of the service says why once)
        try:
            self.c.proxy.install(target.slug, target.pr, event.deployment_id, port, target.log,
                                 served=route_served, host=host, closed=not route_served, subject=event.subject)
        except Exception as exc:  # noqa: BLE001 - the route step writes it and says why it fails
            target.log.note(f"route not loaded while building ({exc}); written after the health check")
            return False
        if not route_served:  # (a served route stays as it was: probing a sleeping one would wake it)
            try:
                self.c.proxy.wait_served(target.slug, target.pr, event.deployment_id, None, control, closed=True)
            except Exception as exc:  # noqa: BLE001 - cancelled, or not seen: the route step's check waits then
                target.log.note(f"route loaded while building, not seen yet: {exc}")
        return True

    def remove_prepared_route(self, target: Target, prepared: Future[bool]) -> None:
        """A new preview that did not come up leaves no route (as when routes were written only after health)."""
        try:
            if prepared.result():
                self.c.proxy.remove(target.slug, target.pr, target.log)
        except Exception as exc:  # noqa: BLE001 - the deploy's own failure is what is reported
            target.log.note(f"route of the failed deploy not removed: {exc}")

    def route(self, event: PullRequestEvent, target: Target, record: DeploymentRecord, route_served: bool,
              control: FlowControl, prepared: Future[bool] | None = None) -> None:
        """Open the route loaded while the app built (no reload), else write it now; `running` and the ready
        comment only once nginx's workers serve it."""
        proxy = self.c.proxy
        if prepared is not None and prepared.result():
            try:
                proxy.open(target.slug, target.pr)
            except OSError as exc:
                raise StepFailed("Nginx reload failed", f"the route's flag could not be written: {exc}") from None
        else:
            self.install_route(event, target, record, route_served)
        try:
            self.wait_served(event, target, control)
        except FlagUnseen as exc:  # no route carries its flag from now on: this one is written open and reloaded
            target.log.note(f"{exc}: the route is written without it")
            proxy.stop_using_flags()
            self.install_route(event, target, record, route_served=False)
            self.wait_served(event, target, control)

    def install_route(self, event: PullRequestEvent, target: Target, record: DeploymentRecord,
                      route_served: bool) -> None:
        try:
            host, port = self.c.runtime.app_address(event.deployment_id, record.exposedAppPort)
            self.c.proxy.install(target.slug, target.pr, event.deployment_id, port, target.log,
                                 served=route_served, host=host, subject=event.subject)
        except RuntimeFailure as exc:
            raise StepFailed(exc.message, exc.detail) from None
        except (ProxyError, OSError) as exc:
            raise StepFailed("Nginx reload failed", str(exc)) from None

    def wait_served(self, event: PullRequestEvent, target: Target, control: FlowControl) -> None:
        """nginx serves the route, else StepFailed; FlagUnseen is left to `route`, which writes it again."""
        try:
            self.c.proxy.wait_served(target.slug, target.pr, event.deployment_id, target.log, control)
        except FlagUnseen:
            raise
        except ProxyError as exc:
            raise StepFailed("Nginx route not served", str(exc)) from None

    def checkout(self, event: PullRequestEvent, target: Target, control: FlowControl) -> None:
        if not event.clone_url or not event.branch or not event.commit_sha:
            raise StepFailed("The pull request has no clone URL, branch or commit to deploy")
        git = self.c.git
        try:
            if git.has_checkout(target.work_dir, target.git_dir):
                git.checkout(event.clone_url, event.branch, event.commit_sha, target.work_dir, target.git_dir,
                             target.log, control, local=event.local, codehost=event.codehost)
            else:
                remove_tree(target.work_dir)  # a partial clone, or a checkout of the old layout (.git inside)
                remove_tree(target.git_dir)
                target.work_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
                git.clone(event.clone_url, event.branch, event.commit_sha, target.work_dir, target.git_dir,
                          target.log, control, local=event.local,
                          mirror=mirror_name(event.project_slug, event.repository), codehost=event.codehost)
            for private in (target.work_dir, target.git_dir):
                private.chmod(0o700)  # a build user (BUILD_COMMANDS_MODE=host) of another preview must not read it
        except CloneRefused as exc:
            raise StepFailed(str(exc)) from None
        except CommandFailed as exc:
            raise StepFailed("Git clone or checkout failed", exc.tail()) from None
        except OSError as exc:
            raise StepFailed(f"Work directory cannot be written: {exc.strerror}") from None

    def configure(self, event: PullRequestEvent, target: Target) -> PreviewConfig:
        try:
            config = load_checkout_config(self.c.plugins, target.work_dir)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        set_fields(self.c.store, event.deployment_id, framework=config.framework, dbType=config.database,
                   appPort=config.app_port)
        return config

    def build_commands(self, event: PullRequestEvent, target: Target, config: PreviewConfig,
                       control: FlowControl) -> None:
        framework = self.c.plugins.provided.frameworks[config.framework]
        try:
            self.c.build_commands.run_all(config.build_commands, target.work_dir, event.deployment_id,
                                          framework.toolchain_image, target.log, control)
        except BuildCommandError as exc:  # its toolchain image is pulled first
            raise StepFailed(with_pull_error(exc.message, exc.detail), exc.detail) from None
        try:
            # After build_commands too: they may have created links. Compose and the renderer read the checkout.
            check_links(target.work_dir)
        except UnsafeCheckout as exc:
            raise StepFailed(str(exc)) from None

    def render(self, event: PullRequestEvent, target: Target, record: DeploymentRecord,
               config: PreviewConfig) -> tuple[RenderedDeployment, Path]:
        context = self._context(event, record)
        try:
            rendered = render_deployment(self.c.plugins, target.work_dir, config, context, self.c.runtime.read)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        except RuntimeFailure as exc:
            raise StepFailed("docker compose could not read the compose file", exc.detail) from None
        try:
            return rendered, write_rendered(target.work_dir, rendered)
        except OSError as exc:
            raise StepFailed(f"Work directory cannot be written: {exc.strerror}") from None

    def data_seed(self, event: PullRequestEvent, target: Target, config: PreviewConfig,
                  rendered: RenderedDeployment) -> DataSeed | None:
        """The repository's `seed` as the runtime restores it: the dump in the checkout (a regular file, no link)
        or the operator's snapshot of this project; StepFailed when the preview cannot have it."""
        if config.seed is None:
            return None
        if rendered.seed is None or rendered.seed.restore is None:
            where = " of a repository compose file" if rendered.repository_owned else ""
            raise StepFailed(f"seed is not valid (the {config.database} database{where} cannot be seeded)")
        if config.seed.file is not None:
            path = target.work_dir / config.seed.file
            if path.is_symlink() or not inside(target.work_dir, path) or not path.is_file():
                raise StepFailed(f"seed.file is not valid ({config.seed.file} is not a file in the repository)")
            name = path.name
        else:
            # A fork's author is not the repository's: the operator's data is not theirs to read.
            if known_fork(event):
                raise StepFailed("seed.snapshot is not valid (a pull request from a fork cannot use the operator's "
                                 "snapshots)")
            name = str(config.seed.snapshot)
            path = snapshot_path(self.c.settings.snapshots_path, target.slug, event, name)
        return DataSeed(repository=event.repository, source=config.seed.source, name=name, path=str(path),
                        commands=list(config.seed.commands))

    def startup_before_main(self, event: PullRequestEvent, target: Target, rendered: RenderedDeployment,
                            compose_file: Path, control: FlowControl) -> Path:
        """startup_commands, then the image's own ENTRYPOINT and CMD (a repository that works with `docker run`
        works as a preview): read from the built (or pulled) image, written into the compose file."""
        pending = rendered.pending_startup
        assert pending is not None
        entrypoint, cmd = self.c.runtime.image_command(event.deployment_id, compose_file, "app", pending.image,
                                                       target.log, control)
        main = main_process(pending, entrypoint, cmd)
        if not main:
            raise StepFailed("The app image has no ENTRYPOINT or CMD to run after startup_commands")
        target.log.note(f"startup_commands, then the image's main process: {main}")
        return rewrite_compose(target.work_dir, with_startup(rendered, pending.commands, main))

    def wait_healthy(self, event: PullRequestEvent, target: Target, record: DeploymentRecord,
                     config: PreviewConfig, compose_file: Path, control: FlowControl) -> None:
        """Probe the health path while watching the containers: an app or database that exits or restarts
        fails the deploy at once, with its own output, which goes into the deployment log (a healthy one's
        output is kept by `run`, beside the route)."""
        settings, runtime = self.c.settings, self.c.runtime
        url = runtime.app_url(event.deployment_id, record.exposedAppPort, config.health_check_path)
        probing = time.monotonic()
        try:
            healthy = wait_healthy(url, settings.health_check_interval_seconds,
                                   settings.health_check_timeout_seconds, target.log, control,
                                   watch=lambda: self._problem(event.deployment_id))
        except AppStopped as exc:
            self.c.metrics.health_seconds.labels("stopped").observe(time.monotonic() - probing)
            self.keep_output(event, target, record, compose_file)
            raise StepFailed(str(exc), self.app_output(event.deployment_id, compose_file)) from None
        except BaseException:  # cancelled, superseded, out of time: what the containers said is still kept
            self.keep_output(event, target, record, compose_file)
            raise
        self.c.metrics.health_seconds.labels("healthy" if healthy else "timeout").observe(time.monotonic() - probing)
        if not healthy:
            self.keep_output(event, target, record, compose_file)
            raise StepFailed("Health check timeout", self.app_output(event.deployment_id, compose_file))

    def _problem(self, deployment_id: str) -> str | None:
        try:
            return self.c.runtime.problem(deployment_id)
        except RuntimeFailure:
            return None  # the engine not answering is not the app's fault; the probes go on

    def app_output(self, deployment_id: str, compose_file: Path) -> str:
        try:
            output = self.c.runtime.logs(deployment_id, compose_file, "app", tail=TAIL)
        except RuntimeFailure as exc:
            return exc.detail
        return "\n".join(output.splitlines()[-TAIL:])

    def _context(self, event: PullRequestEvent, record: DeploymentRecord) -> RenderContext:
        """What the preview's files are rendered with: the render step's, and the password its output masks."""
        return make_context(event.repo_owner, event.repo_name, event.pr_number, record.exposedAppPort,
                            record.exposedDbPort, self.c.password_key(), self.c.settings.image_overrides,
                            self.c.settings.build_cache_mounts, repository=event.repository,
                            secrets_scope=record.secretsScope)

    def keep_output(self, event: PullRequestEvent, target: Target, record: DeploymentRecord,
                    compose_file: Path) -> None:
        """The last OUTPUT_LINES lines of every container, at most OUTPUT_BYTES, secrets and the database
        password masked."""
        try:
            output = self.c.runtime.logs(event.deployment_id, compose_file, None, tail=OUTPUT_LINES)
        except RuntimeFailure as exc:
            target.log.note(f"container output not kept: {exc.message}")
            return
        password = self._context(event, record).db_password
        text = self.c.mask(output[-OUTPUT_BYTES:]).replace(password, "***")
        target.log.note(f"container output (last {OUTPUT_LINES} lines of each service):\n{text or '(none)'}")


def snapshot_path(snapshots: Path, slug: str, event: PullRequestEvent, name: str) -> Path:
    """The operator's snapshot `name` for the repository of `event`: in SNAPSHOTS_DIR/{projectSlug}/, whose
    `.repository` file must name the repository (`owner/name`, or `host/owner/name`) — two repositories can share
    a slug (`acme/web-app`, `acme/web.app`), and only the one the operator meant may read its data."""
    folder = snapshots / slug
    try:
        named = {line.strip().lower() for line in (folder / ".repository").read_text().splitlines() if line.strip()}
    except OSError:
        raise StepFailed(f"seed.snapshot is not valid (the operator's folder SNAPSHOTS_DIR/{slug}/ does not name "
                         "this repository in its .repository file)") from None
    # `owner/name` names a repository of the default code host; another host's is named `host/owner/name`
    accepted = {event.repository} | ({f"{event.repo_owner}/{event.repo_name}".lower()}
                                     if event.repository.startswith(f"{CODEHOST}/") else set())
    if not named & accepted:
        raise StepFailed(f"seed.snapshot is not valid (SNAPSHOTS_DIR/{slug}/ belongs to another repository)")
    path = (folder / name).resolve()  # the operator's own links are followed
    if not path.is_file():
        raise StepFailed(f"seed.snapshot is not valid (the operator keeps no snapshot {name} for this repository "
                         f"in SNAPSHOTS_DIR/{slug}/)")
    return path


def known_fork(event: PullRequestEvent) -> bool:
    """The event names a head repository other than the base (a delivery's, an approval's, the reconcile's). An
    event the service makes from its record (reset-db, redeploy) names none: the record does not keep it."""
    return bool(event.head_repo_full_name) and not event.local and event.from_fork
