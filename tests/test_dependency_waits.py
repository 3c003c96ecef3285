"""How the compose runtime's app waits for its dependencies. A first start leaves it to compose (Docker's schedule
of the healthchecks); an update, whose database has its data, and a wake run the dependencies' healthchecks
themselves, judging only the containers they wait for, and a dependency that exits meanwhile fails them at once."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest
import yaml

from orchestrator.common.commands import DeploymentLog
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.plugin_api import RuntimeFailure
from orchestrator.plugin_api.types import DatabaseSeed
from orchestrator.runtime.compose import ComposeRuntime
from orchestrator.runtime.compose_cli import Container, DockerResources
from orchestrator.runtime.compose_seeding import Seeding
from orchestrator.runtime.dependency_waits import LOOK_SECONDS, await_healthchecks
from tests.support.standins import STANDIN_OVERRIDES, require_engine

BASE = STANDIN_OVERRIDES["debian:bookworm-slim"]


def write(path: Path, services: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump({"services": services}, sort_keys=False), encoding="utf-8")
    return path


def project(tmp_path: Path, db: dict[str, object]) -> tuple[ComposeRuntime, str, Path, DeploymentLog]:
    deployment = f"gate-test-{uuid.uuid4().hex[:8]}"
    labels = {DEPLOYMENT_LABEL: deployment}
    compose_file = write(tmp_path / "compose.yml", {
        "db": {"image": BASE, "labels": labels, "init": True, **db},
        "app": {"image": BASE, "labels": labels, "init": True, "command": ["sleep", "600"],
                "depends_on": {"db": {"condition": "service_healthy"}}},
    })
    return (ComposeRuntime(120, HostEnv.for_state_dir(tmp_path)), deployment, compose_file,
            DeploymentLog(tmp_path / "deploy.log"))


@contextmanager
def composed(tmp_path: Path, db: dict[str, object], started: bool = False,
             stopped: bool = False) -> Iterator[tuple[ComposeRuntime, str, Path, DeploymentLog]]:
    """The project (`started` as a deploy starts it, and `stopped` after), removed from the engine at the end."""
    require_engine()
    runtime, deployment, compose_file, log = project(tmp_path, db)
    try:
        if started or stopped:
            start(runtime, deployment, compose_file, log)
        if stopped:
            runtime.stop(deployment, log)
        yield runtime, deployment, compose_file, log
    finally:
        runtime.remove(deployment, compose_file)


def inspect(deployment: str, service: str) -> dict:
    ident = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={DEPLOYMENT_LABEL}={deployment}",
                            "--filter", f"label=com.docker.compose.service={service}"],
                           capture_output=True, text=True, check=True, timeout=60).stdout.split()
    return json.loads(subprocess.run(["docker", "inspect", *ident], capture_output=True, text=True, check=True,
                                     timeout=60).stdout)[0]


# Healthy about a second after each start, checked by Docker every 2 s as the database plugins do.
SLOW_DATABASE: dict[str, object] = {
    "command": ["sh", "-c", "rm -f /tmp/ready; sleep 1 && touch /tmp/ready && exec sleep 600"],
    "healthcheck": {"test": ["CMD", "test", "-e", "/tmp/ready"], "interval": "2s"},
}
# Healthy at its first start; at the next (a wake) it exits with code 3 after a second, never healthy.
FAILS_ON_WAKE: dict[str, object] = {
    "command": ["sh", "-c", "rm -f /tmp/ready; if [ -e /tmp/started ]; then sleep 1; exit 3; fi; "
                "touch /tmp/started /tmp/ready; exec sleep 600"],
    "healthcheck": {"test": ["CMD", "test", "-e", "/tmp/ready"], "interval": "2s"},
}


def start(runtime: ComposeRuntime, deployment: str, compose_file: Path, log: DeploymentLog) -> None:
    """As a deploy does: the dependencies during the build, then the rest."""
    runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))
    runtime.start(deployment, compose_file, log, FlowControl(120))


def as_an_update(runtime: ComposeRuntime, monkeypatch: pytest.MonkeyPatch, deployment: str, compose_file: Path,
                 log: DeploymentLog) -> None:
    """What `seed_database` finds on an update: the database's volume exists, its data is there."""
    monkeypatch.setattr(runtime.seeding, "plan", lambda *args, **kwargs: Seeding(existing=True))
    seed = DatabaseSeed(volume="data", path="/data", environment={}, ready=["true"], command=["true"], script="")
    runtime.seed_database(deployment, compose_file, seed, log, FlowControl(120))


class Healthchecks:
    """A dependency whose healthcheck passes from the `passes_from`-th run on (never: None)."""

    def __init__(self, passes_from: int | None) -> None:
        self.passes_from = passes_from
        self.runs = 0

    def passes_healthcheck(self, container: Container, control: FlowControl) -> bool:
        self.runs += 1
        return self.passes_from is not None and self.runs >= self.passes_from


def test_a_dependency_is_looked_at_only_after_a_look_s_age(tmp_path: Path) -> None:
    """A database that needs a second round of its healthcheck is not held back by a look at the containers (docker
    ps and inspect, slow on an engine with many): the first look comes LOOK_SECONDS after the start."""
    database = [Container("db-1", "db", ["CMD", "pg_isready"])]
    looks: list[float] = []

    def problem(services: tuple[str, ...]) -> str | None:
        looks.append(time.monotonic())
        return "db exited with code 1" if len(looks) == 2 else None

    log = DeploymentLog(tmp_path / "log")
    assert await_healthchecks(cast(DockerResources, Healthchecks(3)), problem, database, log, FlowControl(30))
    assert looks == []  # passed on its third round, 0.2 s in
    started = time.monotonic()
    with pytest.raises(RuntimeFailure, match="Containers failed to start"):
        await_healthchecks(cast(DockerResources, Healthchecks(None)), problem, database, log, FlowControl(30))
    assert len(looks) == 2 and looks[0] - started >= LOOK_SECONDS and looks[1] - looks[0] >= LOOK_SECONDS * 0.98

@pytest.mark.docker
def test_an_update_awaits_the_database_beside_the_build_then_starts_the_app_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build runs while `start_dependencies` does (build_steps.py): an update's wait for its database is done
    there, and `start` has only the app to start. A database Docker's healthcheck found healthy since it started
    needs no probe of its own."""
    with composed(tmp_path, SLOW_DATABASE, started=True) as (runtime, deployment, compose_file, log):
        first_app = inspect(deployment, "app")["Id"]
        as_an_update(runtime, monkeypatch, deployment, compose_file, log)
        done = len(log.path.read_text())
        runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))
        beside_the_build = log.path.read_text()[done:]
        # running, and healthy by Docker's own healthcheck since it started: nothing probed again
        assert "db: healthy (Docker's own healthcheck" in beside_the_build
        assert "healthcheck of db passes" not in beside_the_build
        done += len(beside_the_build)
        runtime.start(deployment, compose_file, log, FlowControl(120))
        starting = log.path.read_text()[done:]  # they passed a moment ago: not looked at again
        assert "healthcheck" not in starting and "db: healthy" not in starting and "--no-deps app" in starting
        assert inspect(deployment, "app")["State"]["Running"] and inspect(deployment, "app")["Id"] == first_app

        # After a build longer than a look's age: looked at again, healthy by Docker's word, the app started alone
        as_an_update(runtime, monkeypatch, deployment, compose_file, log)
        runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))
        time.sleep(LOOK_SECONDS)
        done = len(log.path.read_text())
        runtime.start(deployment, compose_file, log, FlowControl(120))
        starting = log.path.read_text()[done:]
        assert "db: healthy" in starting and "healthcheck of db passes" not in starting and "--no-deps app" in starting
        assert inspect(deployment, "app")["State"]["Running"]


@pytest.mark.docker
def test_a_database_that_exits_during_an_update_fails_its_start_and_the_app_is_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with composed(tmp_path, FAILS_ON_WAKE, stopped=True) as (runtime, deployment, compose_file, log):
        # its next start exits with code 3
        as_an_update(runtime, monkeypatch, deployment, compose_file, log)
        with pytest.raises(RuntimeFailure) as early:
            runtime.start_dependencies(deployment, compose_file, log, FlowControl(30))
        assert early.value.detail == "db exited with code 3"
        with pytest.raises(RuntimeFailure) as failure:  # the flow logs the early failure and starts: not the app
            runtime.start(deployment, compose_file, log, FlowControl(30))
        assert failure.value.detail == "db exited with code 3"
        assert not inspect(deployment, "app")["State"]["Running"]


@pytest.mark.docker
def test_a_database_that_goes_during_the_build_is_seen_by_the_start(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Healthy beside the build, gone when the build is done: `start` looks again and does not start the app."""
    with composed(tmp_path, SLOW_DATABASE, stopped=True) as (runtime, deployment, compose_file, log):
        as_an_update(runtime, monkeypatch, deployment, compose_file, log)
        runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))  # healthy again
        subprocess.run(["docker", "kill", inspect(deployment, "db")["Id"]], check=True, capture_output=True,
                       timeout=60)  # meanwhile: killed (out of memory, say)
        time.sleep(LOOK_SECONDS)  # a build longer than a look's age: `start` looks again
        with pytest.raises(RuntimeFailure) as failure:
            runtime.start(deployment, compose_file, log, FlowControl(30))
        assert failure.value.detail == "db exited with code 137"
        assert not inspect(deployment, "app")["State"]["Running"]


@pytest.mark.docker
def test_a_build_that_fails_ends_the_wait_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dependency that never becomes healthy does not hold a failed build's deploy for READY_TIMEOUT."""
    never_healthy = {"command": ["sleep", "600"], "healthcheck": {"test": ["CMD", "false"], "interval": "60s"}}
    with composed(tmp_path, never_healthy) as (runtime, deployment, compose_file, log):
        (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nRUN exit 3\n")
        services = yaml.safe_load(compose_file.read_text())["services"]
        services["app"]["build"] = {"context": str(tmp_path)}
        services["app"]["image"] = f"po-test-failing-{deployment}"
        write(compose_file, services)
        runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))  # db created, not awaited
        as_an_update(runtime, monkeypatch, deployment, compose_file, log)
        with ThreadPoolExecutor(1) as pool:
            began = time.monotonic()
            waiting = pool.submit(runtime.start_dependencies, deployment, compose_file, log, FlowControl(300))
            time.sleep(1)
            with pytest.raises(RuntimeFailure, match="Docker build failed"):
                runtime.build(deployment, compose_file, log, FlowControl(300))
            waiting.result(timeout=60)
            assert time.monotonic() - began < 60  # READY_TIMEOUT is 120 s
        assert "db: no longer awaited (the build failed)" in log.path.read_text()


@pytest.mark.docker
def test_a_wake_waits_for_the_database_while_the_app_container_is_still_stopped(tmp_path: Path) -> None:
    """The app of a sleeping preview is stopped (exited) until the database is healthy: only the awaited
    containers are judged meanwhile."""
    with composed(tmp_path, SLOW_DATABASE, stopped=True) as (runtime, deployment, compose_file, log):
        assert not inspect(deployment, "app")["State"]["Running"]
        runtime.wake(deployment, compose_file, log, FlowControl(120))
        assert inspect(deployment, "app")["State"]["Running"]
        # the wake ran the database's healthcheck until it passed, more than once
        assert "rounds" in log.path.read_text().rsplit("healthcheck of db passes", 1)[1].splitlines()[0]


@pytest.mark.docker
def test_a_dependency_that_exits_during_a_wake_fails_it_with_its_exit_code(tmp_path: Path) -> None:
    with composed(tmp_path, FAILS_ON_WAKE, stopped=True) as (runtime, deployment, compose_file, log):
        with pytest.raises(RuntimeFailure) as failure:  # within seconds, not after the 120 s wait for health
            runtime.wake(deployment, compose_file, log, FlowControl(30))
        assert failure.value.detail == "db exited with code 3"
        assert not inspect(deployment, "app")["State"]["Running"]


@pytest.mark.docker
def test_without_a_healthcheck_a_service_healthy_wait_is_left_to_compose(tmp_path: Path) -> None:
    with composed(tmp_path, {"command": ["sleep", "600"]}) as (runtime, deployment, compose_file, log):
        runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))
        with pytest.raises(RuntimeFailure) as failure:
            runtime.start(deployment, compose_file, log, FlowControl(120))
        assert "healthcheck" in failure.value.detail.lower()  # compose's own word for it


@pytest.mark.docker
def test_a_dependency_that_exits_while_the_app_waits_fails_the_start_with_its_exit_code(tmp_path: Path) -> None:
    with composed(tmp_path, {
        "command": ["sh", "-c", "sleep 1; exit 3"],
        "healthcheck": {"test": ["CMD", "false"], "interval": "60s"},
    }) as (runtime, deployment, compose_file, log):
        runtime.start_dependencies(deployment, compose_file, log, FlowControl(120))
        with pytest.raises(RuntimeFailure) as failure:
            runtime.start(deployment, compose_file, log, FlowControl(120))
        assert failure.value.message == "Containers failed to start"
        assert "db" in failure.value.detail and "3" in failure.value.detail
        assert runtime.docker.container_states(deployment).get("app", {}).get("Running") is not True
