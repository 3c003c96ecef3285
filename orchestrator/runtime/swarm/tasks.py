"""Reading a preview's swarm tasks: why a service is not running (exited, restarting, rejected, not placeable),
waiting for the services others depend on and for an update to be rolled out, and whether the preview's node is
gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from orchestrator.plugin_api import FlowControl, RuntimeFailure
from orchestrator.runtime.swarm.cli import SwarmCli, SwarmNode, Task

WAVE_TIMEOUT = 300.0  # a dependency's health checks have this long to pass
STUCK_SECONDS = 15.0  # a task pending with a scheduler error this long will not be placed
FAILED_STATES = ("failed", "rejected")
PENDING = " (pending)"  # ends the problem of a task the scheduler cannot place (yet)
LIVE = ("assigned", "accepted", "preparing", "ready", "starting", "running")  # a task that holds or will hold a node


def await_services(cli: SwarmCli, deployment_id: str, wanted: dict[str, str], baseline: set[str],
                   control: FlowControl) -> None:
    """Until each service runs (healthy, when it has a health check) or has completed, as its dependents
    ask; a failed or unplaceable task fails the start, as compose fails `up` for a dependency."""
    def up(name: str, tasks: list[Task]) -> bool:
        state = wanted[name]
        return any(task.state == state and (state == "complete" or task.desired == "running")
                   for task in tasks if task.service == name)

    _await(cli, deployment_id, list(wanted), up, baseline, control, "dependency failed to start: ",
           "(is the health check passing?)")


def await_rollout(cli: SwarmCli, deployment_id: str, services: list[str], baseline: set[str],
                  control: FlowControl) -> None:
    """Until each of `services` (those the deploy changed) runs a task of this attempt (healthy, when it has a
    health check; or has completed) and none of before still runs (on a node that is up: a down node's tasks
    keep the state they had): `docker stack deploy` only hands the swarm the new specs, and the health check must
    not be answered by the app being replaced."""
    ready = {node.id for node in cli.nodes() if node.state == "ready"}  # elsewhere a task's state is stale
    nodes_of: dict[str, str] = {}  # task id -> node id, asked once per task (`stack ps` names nodes by hostname,
    # or by id once the node is gone: neither tells a node that left from one that rejoined under its name)

    def running_before(task: Task) -> bool:
        if task.id not in baseline or task.state not in LIVE:
            return False
        if task.id not in nodes_of:
            nodes_of.update(cli.task_nodes([task.id]))
        return nodes_of.get(task.id, "") in ready

    def rolled_out(name: str, tasks: list[Task]) -> bool:
        mine = [task for task in tasks if task.service == name]
        if any(running_before(task) for task in mine):
            return False
        return any(task.id not in baseline and task.state in ("running", "complete") for task in mine)

    _await(cli, deployment_id, services, rolled_out, baseline, control, "", "(is the health check passing?)")


def _await(cli: SwarmCli, deployment_id: str, names: list[str], done: Callable[[str, list[Task]], bool],
           baseline: set[str], control: FlowControl, prefix: str, hint: str) -> None:
    started = time.monotonic()
    while True:
        tasks = cli.tasks(deployment_id)
        waiting = []
        for name in names:
            if done(name, tasks):
                continue
            problem = task_problem(name, tasks, baseline)
            if problem is not None and (not problem.endswith(PENDING) or
                                        time.monotonic() - started > STUCK_SECONDS):
                raise RuntimeFailure("Containers failed to start", f"{prefix}{problem}")
            waiting.append(name)
        if not waiting:
            return
        if time.monotonic() - started > WAVE_TIMEOUT:
            raise RuntimeFailure("Containers failed to start", f"{', '.join(waiting)} not up after "
                                 f"{WAVE_TIMEOUT:.0f} s {hint}")
        control.check()
        control.wait(0.5)


def node_lost(pinned: str, nodes: dict[str, SwarmNode]) -> str | None:
    node = nodes.get(pinned)
    if node is None:
        return ("The preview's swarm node left the swarm, and its database with it; push a commit to deploy the "
                "preview on another node (with an empty database)")
    if node.state != "ready":
        return (f"The preview's swarm node {node.hostname} is {node.state} (it left the swarm or its engine "
                "stopped); its database is on that node: start the node again, then push a commit, to keep the "
                "data, or push a commit now to deploy the preview on another node with an empty database")
    return None


def task_problem(service: str, tasks: list[Task], baseline: set[str]) -> str | None:
    """Why `service` is not running, from its tasks of this attempt (those not in `baseline`)."""
    mine = [task for task in tasks if task.service == service]
    failed = [task for task in mine if task.id not in baseline and task.state in FAILED_STATES]
    current = [task for task in mine if task.desired in ("running", "ready")]
    if failed:
        last = failed[0]
        code = last.exit_code
        if current:
            return f"{service} is restarting (exit code {code})" if code is not None else \
                f"{service} is restarting ({last.error})"
        if last.state == "rejected" or code is None:
            return f"{service} could not start on {last.node or 'any node'}: {last.error or last.state}"
        return f"{service} exited with code {code}"
    done = [task for task in mine if task.id not in baseline and task.state == "complete"]
    if done and not current:
        return f"{service} exited with code 0"
    pending = [task for task in current if task.state == "pending" and task.error]
    if pending:
        return f"{service} cannot be placed: {pending[0].error}{PENDING}"
    return None


class TaskSource(NamedTuple):
    """What a service's tasks are made from (compared before and after a deploy)."""

    template: Any
    endpoint: Any
    mode: Any

    @property
    def replicas(self) -> int:
        return int(((self.mode or {}).get("Replicated") or {}).get("Replicas") or 0)


def task_sources(cli: SwarmCli, deployment_id: str) -> dict[str, TaskSource]:
    """service -> what its tasks are made from, as the swarm has it now: a service whose spec a deploy changed
    gets new tasks (or, scaled back from zero, its task)."""
    return {service["Spec"]["Name"].removeprefix(f"{deployment_id}_"):
            TaskSource(service["Spec"].get("TaskTemplate"), service["Spec"].get("EndpointSpec"),
                       service["Spec"].get("Mode"))
            for service in cli.stack_services(deployment_id)}
