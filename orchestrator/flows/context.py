"""What every flow shares: the service's settings, the tracking store, the adapters and the runtime, and where
one deployment lives on this host."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.adapters.build_commands import BuildCommands
from orchestrator.adapters.git import Git
from orchestrator.adapters.git_mirror import Mirrors
from orchestrator.adapters.nginx import Proxy
from orchestrator.common.commands import DeploymentLog, deployment_log_path
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import preview_segment
from orchestrator.common.secret_files import random_key, read_or_create
from orchestrator.flows.handler import FlowError
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.runtime import Runtime, RuntimeFailure
from orchestrator.plugin_api.types import BUILT_IMAGES, CACHE_ID_PREFIX
from orchestrator.rendering.compose_file import GENERATED_COMPOSE, REPO_COMPOSE_OUTPUT
from orchestrator.rendering.plugin_host import CodeHosts, PluginHost
from orchestrator.settings import Settings
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.flows")

# Keyed names a build's output shows: cache ids, and built images (a base preview's kept dependencies among them);
# each is hidden from anyone who might write a Dockerfile that names it (a base image's ONBUILD, `ARG` in a FROM).
KEYED_NAME = re.compile(f"({re.escape(CACHE_ID_PREFIX)}|{re.escape(BUILT_IMAGES)}/)[0-9a-f]{{8,}}")


def mask_keyed_names(text: str) -> str:
    return KEYED_NAME.sub(r"\1***", text)


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

    def compose_file(self) -> Path | None:
        """The compose file the service wrote for the deployment's last deploy (a repository's, normalized and
        judged, or one generated from the plugins), None before any."""
        return next((self.work_dir / name for name in (REPO_COMPOSE_OUTPUT, GENERATED_COMPOSE)
                     if (self.work_dir / name).is_file()), None)


@dataclass(frozen=True)
class Adapters:
    """The host's tools the flows use: git, nginx, the build commands' runner, and the environment they run in."""

    env: HostEnv
    git: Git
    proxy: Proxy
    build_commands: BuildCommands

    @classmethod
    def for_settings(cls, settings: Settings, codehosts: CodeHosts, runtime: Runtime) -> Adapters:
        """Built by the composition root (flows.build_engine) from the settings, the code hosts (clone
        credentials) and the runtime (whether its previews sleep, whether its updates leave a gap)."""
        env = HostEnv.for_state_dir(settings.state_dir)
        git = Git(codehosts.clone_authorization, settings.allowed_clone_protocols, settings.git_timeout_seconds, env,
                  Mirrors(settings.state_dir / "mirrors"))
        # routing, protection and, when previews may sleep (and the runtime can wake them), the wake: adapters/nginx/
        proxy = Proxy.for_settings(settings, env, sleep=settings.idle_seconds > 0 and runtime.can_sleep,
                                   hand_off=runtime.updates_leave_gap)
        build_commands = BuildCommands(settings.build_commands_mode, settings.build_command_timeout_seconds, env,
                                       settings.build_commands_user,
                                       lambda image: settings.image_overrides.get(image, image))
        return cls(env, git, proxy, build_commands)


class FlowContext:
    """The flows' shared dependencies, every one given: built once by the composition root."""

    def __init__(self, settings: Settings, plugins: PluginHost, codehosts: CodeHosts, metrics: Metrics,
                 runtime: Runtime, store: DeploymentStore, adapters: Adapters) -> None:
        self.settings = settings
        self.plugins = plugins
        self.codehosts = codehosts
        self.metrics = metrics
        self.runtime = runtime
        self.store = store
        self.env = adapters.env
        self.git = adapters.git
        self.proxy = adapters.proxy
        self.build_commands = adapters.build_commands
        self._codehosts = codehosts
        self._password_key: bytes | None = None

    def target(self, slug: str, pr: int, deployment_id: str) -> Target:
        root = self.settings.deployments_dir.resolve()
        work = (root / slug / preview_segment(pr)).resolve()
        if not work.is_relative_to(root) or work == root:
            raise FlowError("Invalid deployment path")
        return Target(deployment_id, slug, pr, work, work.with_name(f"{preview_segment(pr)}.git"),
                      DeploymentLog(deployment_log_path(root, slug, pr)))

    def password_key(self) -> bytes:
        """The key of the database passwords (common/secret_files.py); read once, created on first need."""
        if self._password_key is None:
            has_previews = bool(self.store.read().deployments)
            secret = self.settings.codehost_webhook_secret.get_secret_value().encode()
            self._password_key = read_or_create(self.settings.db_password_key_path,
                                                lambda: secret if has_previews else random_key())
        return self._password_key

    def secrets(self) -> list[str]:
        """What is masked: the settings', the runtime's and the code hosts' secrets. Asked each time: a code host's
        tokens may be renewed while the service runs (a GitHub App's)."""
        return self._codehosts.masked([*self.settings.secret_values(), *self.runtime.secrets()])

    def mask(self, text: str) -> str:
        """The service's own secrets never reach a comment, nor the keyed names of build caches and built images (a
        build's output names them; a pull request's own Dockerfile that knew one could write into that cache, or
        read another repository's image by a name put together from variables)."""
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return mask_keyed_names(text)

    def limit_message(self) -> str:
        return (f"Preview limit reached: {self.settings.max_concurrent_previews} previews exist "
                "(MAX_CONCURRENT_PREVIEWS); close another pull request, then push again")

    def problem(self, deployment_id: str, service: str = "app") -> str | None:
        """Why the preview cannot come up while a health check waits for `service` (the app, or a routed service):
        its app or database stopped, or that service did; None while they run, or when the engine does not answer
        (not the app's fault: the probes go on)."""
        try:
            return self.runtime.problem(deployment_id) or (
                self.runtime.service_problem(deployment_id, service) if service != "app" else None)
        except RuntimeFailure:
            return None

    def ports_in_use(self) -> set[int]:
        """Host ports the runtime holds; none when it cannot tell (a port it holds then fails the bind test)."""
        try:
            return self.runtime.ports_in_use()
        except RuntimeFailure as exc:
            log.warning("%s: %s", exc.message, exc.detail)
            return set()
