"""The `swarm` runtime: a preview is a stack (stack name = deployment id) on a Docker Swarm.

The service runs on a manager and uses its Docker engine. A deploy builds with `docker compose build` there,
pushes every image of the preview to SWARM_REGISTRY (pushing.py), turns the compose file into a stack file
(stack.py) and runs `docker stack deploy`. A preview lives on one node (placement.py): the database's volume is on
that node, and the app's host-mode port answers at that node's address, which is where nginx proxies
(`app_address`).
"""

from __future__ import annotations

import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import (
    OWNER_LABEL,
    Check,
    CommandFailed,
    DeploymentLog,
    FlowControl,
    HostEnv,
    Runtime,
    RuntimeFailure,
    RuntimeSpec,
    Settings,
    dump_compose,
    hookimpl,
    read_own_settings,
)
from orchestrator.runtime.compose_cli import Compose, DockerResources
from orchestrator.runtime.failures import failure
from orchestrator.runtime.swarm.cli import SwarmCli
from orchestrator.runtime.swarm.doctor import swarm_checks
from orchestrator.runtime.swarm.gc import PushGate, collect, due
from orchestrator.runtime.swarm.placement import Placement
from orchestrator.runtime.swarm.pushing import ImagePush
from orchestrator.runtime.swarm.registry import Registry, client_config
from orchestrator.runtime.swarm.removal import owned_resources, remove_deployment
from orchestrator.runtime.swarm.settings import SwarmSettings
from orchestrator.runtime.swarm.stack import StackRefused, plan_stack
from orchestrator.runtime.swarm.tasks import (
    PENDING,
    STUCK_SECONDS,
    TaskSource,
    await_rollout,
    await_services,
    task_problem,
    task_sources,
)
from orchestrator.runtime.swarm.waves import StackPlan

NAME = "swarm"
WATCHED = ("app", "db")
STACK_FILE = "stack.yml"


@hookimpl(trylast=True)
def po_runtimes() -> list[RuntimeSpec]:
    return [RuntimeSpec(name=NAME, description="docker stack deploy on a Docker Swarm (one stack per preview, "
                                               "images through SWARM_REGISTRY)")]


@hookimpl(trylast=True)
def po_runtime(name: str, settings: Settings) -> SwarmRuntime | None:
    if name != NAME:
        return None
    own = read_own_settings(SwarmSettings)  # SWARM_*: a bad one stops start-up, naming the variable
    registry = Registry(own.registry, own.registry_scheme, credentials=own.registry_credentials)
    return SwarmRuntime(registry, own.node_engines, settings.compose_timeout_seconds,
                        HostEnv.for_state_dir(settings.state_dir), shlex.split(own.registry_gc_command),
                        settings.state_dir, own.registry_gc_interval_seconds, secrets=own.secret_values())


class SwarmRuntime(Runtime):
    name = NAME
    updates_leave_gap = True  # stop-first: a host-mode port cannot be held by the old and the new task

    def __init__(self, registry: Registry, node_engines: dict[str, str], timeout: float, env: HostEnv,
                 gc_command: list[str] | None = None, state_dir: Path | None = None, gc_interval: float = 0.0,
                 secrets: list[str] | None = None) -> None:
        self.registry = registry
        self._secrets = secrets or []
        self._env = env
        self._gc_command = gc_command or []
        self._state_dir = state_dir
        self._gc_interval = gc_interval
        self._gate = PushGate()  # pushes share it; the registry's garbage collection holds it alone
        self.compose = Compose(timeout, env)
        self.docker = DockerResources(env)
        config = None
        if registry.credentials is not None and state_dir is not None:
            config = client_config(state_dir / "swarm-docker-config", registry.host, registry.credentials,
                                   env.docker())
        self.cli = SwarmCli(env, node_engines, timeout, config)
        self.placement = Placement(self.cli)
        self.push = ImagePush(self.cli, self.compose, registry, self._gate)
        self._images: dict[str, dict[str, str]] = {}  # deployment -> service -> pushed reference (build -> start)
        self._baseline: dict[str, set[str]] = {}  # task ids from before the last start: not this attempt's
        self._address: dict[str, str] = {}  # deployment -> its node's address
        self._started: dict[str, float] = {}  # deployment -> when its last start began (monotonic)

    def read(self, compose_file: Path, deployment_id: str) -> dict[str, Any]:
        return self.compose.normalized(compose_file, deployment_id)

    def build(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        with failure("docker compose could not read the compose file"):  # refused before anything is built
            self._plan(deployment_id, self.compose.normalized(compose_file, deployment_id), None, "-", [])
        with failure("Docker build failed"):
            self.compose.build(deployment_id, compose_file, log, control)
        with failure("Images could not be pushed to SWARM_REGISTRY"):
            self._images[deployment_id] = self.push.every_image(deployment_id, compose_file, log, control)

    def image_command(self, deployment_id: str, compose_file: Path, service: str, image: str, log: DeploymentLog,
                      control: FlowControl) -> tuple[list[str] | None, list[str] | None]:
        with failure("The app image's entrypoint could not be read"):
            try:
                return self.docker.image_command(image)
            except CommandFailed:  # an `image:` the build did not make: pulled on the manager
                self.compose.pull(deployment_id, compose_file, service, log, control)
                return self.docker.image_command(image)

    def start_dependencies(self, deployment_id: str, compose_file: Path, log: DeploymentLog,
                           control: FlowControl) -> None:
        """Nothing early: the stack is deployed in waves by `start` (db first, then the app once db is healthy)."""

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        with failure("Containers failed to start"):
            document = self.compose.normalized(compose_file, deployment_id)
            images = (self._images.pop(deployment_id, None)
                      or self.push.every_image(deployment_id, compose_file, log, control))
            node, former = self.placement.place(deployment_id, log)
            plan = self._plan(deployment_id, document, images, node.id, former)
            for note in plan.notes:
                log.note(note)
            log.note(f"the preview runs on node {node.hostname} ({node.address})")
            tasks = self.cli.tasks(deployment_id)
            self._baseline[deployment_id] = {task.id for task in tasks}
            self._started[deployment_id] = time.monotonic()
            self._address[deployment_id] = node.address
            before = task_sources(self.cli, deployment_id)
            # Services whose task ended and will not be restarted (restart "no", its node stopped meanwhile): a
            # deploy that changes nothing of them would leave them down, so they are given a new task. (One scaled
            # to zero gets one from the deploy: the stack file says one replica.)
            ended = {name for name, spec in before.items() if spec.replicas > 0
                     and not any(task.service == name and task.desired == "running" for task in tasks)}
            # Not in the checkout: a file of the pull request's must never be where the service writes.
            with tempfile.TemporaryDirectory(prefix="po-stack-") as scratch:
                self._deploy(deployment_id, plan, Path(scratch) / STACK_FILE, log, control, before, ended)
            after = task_sources(self.cli, deployment_id)
            changed = sorted(name for name, spec in after.items() if before.get(name) != spec)
            if changed:  # `start` returns once the preview is what was deployed: the health check asks the new app
                log.note(f"waiting for the swarm to replace {', '.join(changed)}")
                await_rollout(self.cli, deployment_id, changed, self._baseline[deployment_id], control)

    def stop(self, deployment_id: str, log: DeploymentLog | None) -> None:
        """Scaled to zero: the services (and their node) and the volumes stay for the next deploy."""
        with failure("Containers could not be stopped"):
            services = self.cli.stack_services(deployment_id)
            self.cli.scale_to_zero([service["Spec"]["Name"] for service in services], log)

    def remove(self, deployment_id: str, compose_file: Path | None) -> list[str]:
        self._images.pop(deployment_id, None)
        self._baseline.pop(deployment_id, None)
        self._address.pop(deployment_id, None)
        self._started.pop(deployment_id, None)
        self.placement.forget(deployment_id)
        return remove_deployment(self.cli, self.registry, deployment_id)

    def logs(self, deployment_id: str, compose_file: Path, service: str | None, tail: int) -> str:
        with failure("Container logs could not be read"):
            names = [service] if service else sorted(
                s["Spec"]["Name"].removeprefix(f"{deployment_id}_")
                for s in self.cli.stack_services(deployment_id))
            parts = []
            for name in names:
                output = self.cli.service_logs(f"{deployment_id}_{name}", tail)
                parts += [f"{name}  | {line}" for line in output.splitlines()[-tail:]]
            return "\n".join(parts) + ("\n" if parts else "")

    def problem(self, deployment_id: str) -> str | None:
        with failure("Swarm tasks could not be listed"):
            tasks = self.cli.tasks(deployment_id)
            baseline = self._baseline.get(deployment_id, set())
            patient = time.monotonic() - self._started.get(deployment_id, 0.0) < STUCK_SECONDS
            for service in WATCHED:
                found = task_problem(service, tasks, baseline)
                if found is not None and not (patient and found.endswith(PENDING)):
                    return found
            if all(task.state == "running" for task in tasks if task.desired == "running"):
                return None
            return self.placement.node_problem(deployment_id)

    def lost_previews(self, deployment_ids: list[str]) -> dict[str, str]:
        """Previews whose node is down or gone: their database's volume is there, so they stay down until a
        push moves them."""
        with failure("Swarm nodes could not be listed"):
            return self.placement.lost(deployment_ids)

    def owned(self, deployment_id: str | None = None) -> dict[str, str]:
        with failure("Swarm resources could not be listed"):
            return owned_resources(self.cli, self.registry, deployment_id)

    def app_url(self, deployment_id: str, app_port: int, path: str) -> str:
        host, port = self.app_address(deployment_id, app_port)
        return f"http://{host}:{port}{path}"

    def app_address(self, deployment_id: str, app_port: int) -> tuple[str, int]:
        """The app's port is published in host mode: it answers at its node's address only."""
        if deployment_id not in self._address:
            with failure("The preview's node could not be found"):
                pinned = self.placement.pinned(deployment_id)[0]
                address = next((node.address for node in self.cli.nodes() if node.id == pinned), "")
            if not address:
                raise RuntimeFailure("The preview's node could not be found", f"{deployment_id} has no stack")
            self._address[deployment_id] = address
        return self._address[deployment_id], app_port

    def ports_in_use(self) -> set[int]:
        with failure("Published ports could not be listed"):
            return self.cli.published_ports()

    def secrets(self) -> list[str]:
        return list(self._secrets)

    def checks(self) -> list[Check]:
        """doctor's lines of the swarm (Runtime's `checks`): doctor.py."""
        return swarm_checks(self.cli, self.registry, self._gc_command, self._gc_interval, self._state_dir)

    def collect_garbage(self) -> bool:
        """The registry's garbage collection (SWARM_REGISTRY_GC_COMMAND), while no push runs, once the last run
        is SWARM_REGISTRY_GC_INTERVAL_SECONDS old; False when the operator collects it or it is not due."""
        if not self._gc_command or self._state_dir is None or not due(self._state_dir, self._gc_interval):
            return False
        collect(self._gc_command, self._state_dir, self._gate, self._env)
        return True

    @property
    def garbage_interval_seconds(self) -> float:
        return self._gc_interval if self._gc_command and self._state_dir is not None else 0.0

    def remove_leftovers(self, owner_marker: str) -> None:
        with failure("Containers of the previous run could not be removed"):
            self.docker.remove_containers(f"{OWNER_LABEL}={owner_marker}")

    # Helpers ------------------------------------------------------------------------------------------------

    def _plan(self, deployment_id: str, document: dict[str, Any], images: dict[str, str] | None, node_id: str,
              former: list[str]) -> StackPlan:
        """The stack file; `images` None: only whether the swarm can run the file at all."""
        if images is None:
            images = {str(name): "-" for name in document.get("services") or {}}
        try:
            return plan_stack(document, deployment_id, images, node_id, former, self.registry.host)
        except StackRefused as exc:
            raise RuntimeFailure("The compose file cannot run on a Docker Swarm", "\n".join(exc.problems)) from None

    def _deploy(self, deployment_id: str, plan: StackPlan, stack_file: Path, log: DeploymentLog,
                control: FlowControl, before: dict[str, TaskSource], ended: set[str]) -> None:
        """One `docker stack deploy` per wave; the last one has every service and prunes the ones the compose
        file no longer has. A service of `ended` that the deploy did not change (`before`: the specs of before)
        gets a new task once its wave is deployed; a changed one gets one anyway."""
        for index, wave in enumerate(plan.waves):
            last = index == len(plan.waves) - 1
            stack_file.write_text(dump_compose(plan.document if last else plan.subset(index)), encoding="utf-8")
            self.cli.deploy(deployment_id, stack_file, log, control, prune=last)
            self._restart_ended(deployment_id, ended & set(wave), before, log)
            awaited = [name for name in wave if name in plan.awaited]
            if not last and awaited:
                log.note(f"waiting for {', '.join(awaited)} before starting what depends on them")
                await_services(self.cli, deployment_id, {name: plan.awaited[name] for name in awaited},
                               self._baseline.get(deployment_id, set()), control)

    def _restart_ended(self, deployment_id: str, ended: set[str], before: dict[str, TaskSource],
                       log: DeploymentLog) -> None:
        """A new task for each service of `ended` whose spec the deploy left as it was (`before`)."""
        if not ended:
            return
        now = task_sources(self.cli, deployment_id)
        for name in sorted(ended):
            if now.get(name) == before.get(name):
                log.note(f"{name}'s task had ended: started again")
                self.cli.force_update(f"{deployment_id}_{name}", log)
