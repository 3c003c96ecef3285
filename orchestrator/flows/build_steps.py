"""The steps of a deploy or update, in order: checkout, preview-config.yml, build_commands, render, build,
startup_commands' main process, start, health, route. Each step turns its adapter's failure into StepFailed with
the spec's message.
A restart (restart.py) fetches no commit and builds nothing when the images are there; every other step runs as
in an update."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.adapters.build_commands import BuildCommandError
from orchestrator.adapters.git import CloneRefused
from orchestrator.adapters.health import AppStopped, wait_healthy
from orchestrator.common.checkout_paths import UnsafeCheckout, check_links, remove_tree
from orchestrator.common.commands import CommandFailed
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.naming import mirror_name
from orchestrator.flows import base_dependencies
from orchestrator.flows.context import FlowContext, StepFailed, Target
from orchestrator.flows.data_steps import DataSteps
from orchestrator.flows.error_lines import with_pull_error
from orchestrator.flows.records import routes_of, set_fields
from orchestrator.flows.restart import checked_out_again, images_kept
from orchestrator.flows.route_steps import RouteSteps
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
        self.data = DataSteps(context)
        self.routes = RouteSteps(context)

    def run(self, event: PullRequestEvent, target: Target, record: DeploymentRecord, control: FlowControl,
            route_served: bool, restart: bool = False) -> Built:
        """Every step, each timed (StageClock). The containers' output of a preview that came up is kept by the
        caller once the preview is `running` (`keep_output`): beside the route it took CPU nginx's reload needed.
        `restart`: the preview runs this commit already (see the module's docstring)."""
        clock = StageClock(target.log, self.c.metrics)
        with clock.stage("checkout"):
            restart = restart and checked_out_again(self.c, event, target, control)
            if not restart:
                self.checkout(event, target, control)
            config = self.configure(event, target)
        with ThreadPoolExecutor(1, thread_name_prefix="migrations") as looking:
            migrations = looking.submit(self.data.migrations, event, target, config, control)
            stages, compose_file = self._build(event, target, record, control, route_served, clock, config, restart)
        return Built(stages, compose_file, migrations.result())

    def _build(self, event: PullRequestEvent, target: Target, record: DeploymentRecord, control: FlowControl,
               route_served: bool, clock: StageClock, config: PreviewConfig,
               restart: bool) -> tuple[dict[str, float], Path]:
        with clock.stage("build_commands"):
            self.build_commands(event, target, config, control)
        with clock.stage("render"):
            rendered, compose_file = self.render(event, target, record, config)
            data = self.data.seed(event, target, config, rendered)
        with ThreadPoolExecutor(1, thread_name_prefix="route") as pool:
            prepared = None
            if (address := self.c.runtime.app_address_before_start(record.exposedAppPort)) is not None:
                prepared = pool.submit(self.routes.prepare, event, target, address, route_served, control)
            try:
                compose_file = self.build_and_start(event, target, rendered, compose_file, control, clock, data,
                                                    restart)
                with clock.stage("health"):
                    self.wait_healthy(event, target, record, config, compose_file, control)
                with clock.stage("route"):
                    self.routes.open(event, target, record, route_served, control, prepared)
            except BaseException:
                if prepared is not None and not route_served:
                    self.routes.remove_prepared(target, prepared)
                raise
        return clock.seconds, compose_file

    def build_and_start(self, event: PullRequestEvent, target: Target, rendered: RenderedDeployment,
                        compose_file: Path, control: FlowControl, clock: StageClock,
                        data: DataSeed | None = None, restart: bool = False) -> Path:
        """Build the images while the database and extra services start (they need no build; a repository's
        seed is restored meanwhile, when it is new), then start. `restart`: the images are kept when the runtime
        has them."""
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
                    if not (restart and images_kept(self.c, event, target, compose_file)):
                        base_dependencies.build(self.c, event, rendered, target.work_dir, compose_file, target.log,
                                                control)
                        base_dependencies.keep(self.c, event, rendered, compose_file, target.log, control)
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
        context = base_dependencies.with_base(self.c, event, self._context(event, record))

        def rendered_with(context: RenderContext) -> RenderedDeployment:
            return render_deployment(self.c.plugins, target.work_dir, config, context, self.c.runtime.read)

        try:
            rendered = base_dependencies.with_fallback(
                context, base_dependencies.to_keep(event, context, rendered_with(context)), rendered_with)
        except ConfigError as exc:
            raise StepFailed("; ".join(exc.problems)) from None
        except RuntimeFailure as exc:
            raise StepFailed("docker compose could not read the compose file", exc.detail) from None
        self.routes.give_ports(event, rendered, config)
        try:
            return rendered, write_rendered(target.work_dir, rendered)
        except OSError as exc:
            raise StepFailed(f"Work directory cannot be written: {exc.strerror}") from None

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
        """Probe the health path — the app's, then each routed service's — while watching the containers: an app,
        database or the routed service waited for that exits or restarts fails the deploy at once, with its own
        output, which goes into the deployment log (a healthy one's output is kept by `run`, beside the route)."""
        probing = time.monotonic()
        checks = [("app", record.exposedAppPort, config.health_check_path, "")] + [
            (route.service, route.port, route.healthCheckPath, f"the route {route.name} (service {route.service})")
            for route in routes_of(self.c.store, event.deployment_id)]
        for service, port, path, shown in checks:
            url = self.c.runtime.app_url(event.deployment_id, port, path)
            settings = self.c.settings
            try:
                healthy = wait_healthy(url, settings.health_check_interval_seconds,
                                       settings.health_check_timeout_seconds, target.log, control,
                                       watch=lambda s=service: self.c.problem(event.deployment_id, s))
            except AppStopped as exc:
                self.c.metrics.health_seconds.labels("stopped").observe(time.monotonic() - probing)
                self.keep_output(event, target, record, compose_file)
                raise StepFailed(f"{exc} (waiting for {shown})" if shown else str(exc),
                                 self.app_output(event.deployment_id, compose_file, service)) from None
            except BaseException:  # cancelled, superseded, out of time: what the containers said is still kept
                self.keep_output(event, target, record, compose_file)
                raise
            if not healthy:
                self.c.metrics.health_seconds.labels("timeout").observe(time.monotonic() - probing)
                self.keep_output(event, target, record, compose_file)
                raise StepFailed(f"Health check timeout: {shown}" if shown else "Health check timeout",
                                 self.app_output(event.deployment_id, compose_file, service))
        self.c.metrics.health_seconds.labels("healthy").observe(time.monotonic() - probing)

    def app_output(self, deployment_id: str, compose_file: Path, service: str = "app") -> str:
        try:
            output = self.c.runtime.logs(deployment_id, compose_file, service, tail=TAIL)
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
