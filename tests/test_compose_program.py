"""The runtime runs the compose plugin's program directly, the one `docker compose` would run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.common.host_env import HostEnv
from orchestrator.runtime import compose_program as program


def plugin(directory: Path, executable: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    found = directory / "docker-compose"
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755 if executable else 0o644)
    return found


def test_the_plugin_the_docker_cli_would_run_is_the_one_run() -> None:
    """Against the docker CLI itself: `docker info` names the compose plugin it runs (no engine needed)."""
    env = HostEnv.for_state_dir(Path("/tmp")).docker()
    listed = subprocess.run(["docker", "info", "--format", "{{range .ClientInfo.Plugins}}{{.Name}} {{.Path}}\n{{end}}"],
                            capture_output=True, text=True, timeout=30, env={**env, "DOCKER_HOST": "unix:///nowhere"})
    paths = dict(line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line)
    assert "compose" in paths, listed.stdout + listed.stderr  # scripts/prepare-test-host installs it
    assert program.compose_program(env) == [paths["compose"]]
    version = subprocess.run([*program.compose_program(env), "version", "--short"], capture_output=True, text=True,
                             timeout=30, env=env)
    assert version.stdout.startswith("2."), version.stdout + version.stderr


def test_the_configuration_s_directories_come_first_then_the_system_s(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    system = plugin(tmp_path / "system")
    monkeypatch.setattr(program, "SYSTEM_PLUGIN_DIRS", (str(tmp_path / "none"), str(system.parent)))
    config = tmp_path / "config"
    env = {"DOCKER_CONFIG": str(config), "HOME": str(tmp_path / "home")}
    assert program.compose_program(env) == [str(system)]
    plugin(config / "cli-plugins", executable=False)  # not executable: the docker CLI skips it too
    assert program.compose_program(env) == [str(system)]
    users = plugin(config / "cli-plugins")
    assert program.compose_program(env) == [str(users)]
    extra = plugin(tmp_path / "extra")
    extra_dirs = [str(tmp_path / "empty"), str(extra.parent)]
    (config / "config.json").write_text(json.dumps({"cliPluginsExtraDirs": extra_dirs}))
    assert program.compose_program(env) == [str(extra)]
    (config / "config.json").write_text("{not json")
    assert program.compose_program(env) == [str(users)]
    home = plugin(tmp_path / "home" / ".docker" / "cli-plugins")  # without DOCKER_CONFIG: ~/.docker
    assert program.compose_program({"HOME": str(tmp_path / "home")}) == [str(home)]


def test_without_a_plugin_on_disk_docker_compose_is_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(program, "SYSTEM_PLUGIN_DIRS", (str(tmp_path / "none"),))
    assert program.compose_program({"HOME": str(tmp_path)}) == ["docker", "compose"]


def test_a_checkout_s_env_file_sets_nothing_of_docker_s_own(tmp_path: Path) -> None:
    """compose reads a checkout's `.env`, and compose 2.6.0 to 2.39.2 also copied it into its own environment wherever
    a variable was unset, before making its Docker client: every variable docker, compose and buildx read is set."""
    from orchestrator.common.host_env import CLIENT_DEFAULTS, DOCKER_CLIENT_VARIABLES
    from orchestrator.runtime.compose_cli import Compose

    env = HostEnv.for_state_dir(tmp_path, {"PATH": "/usr/bin:/bin"}).docker()
    for name in (*DOCKER_CLIENT_VARIABLES, "BUILDX_BUILDER", "BUILDX_CONFIG", "DOCKER_BUILDKIT", "COMPOSE_ENV_FILES",
                 "DOCKER_API_VERSION", "DOCKER_DEFAULT_PLATFORM", "COMPOSE_BAKE"):
        assert name in env, name
    assert env["DOCKER_HOST"] == "" and env["BUILDX_BUILDER"] == "" and env["COMPOSE_BAKE"] == "false"
    assert env["DOCKER_BUILDKIT"] == "1" and set(CLIENT_DEFAULTS) <= set(env)
    operator = HostEnv.for_state_dir(tmp_path, {"DOCKER_HOST": "unix:///run/d.sock", "DOCKER_CONFIG": "/etc/dc"})
    assert operator.docker()["DOCKER_HOST"] == "unix:///run/d.sock" and operator.docker()["DOCKER_CONFIG"] == "/etc/dc"
    # and the compose installed here, run as the service runs it: a `.env` naming a host file as an env file reads
    # nothing from it; the `.env`'s own variables are still the file's (compose's interpolation, as users expect)
    (tmp_path / "secret.env").write_text("SECRET=from-the-host\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".env").write_text(f"COMPOSE_ENV_FILES={tmp_path / 'secret.env'}\nDOCKER_HOST=tcp://127.0.0.1:9\n"
                               "OWN=from-the-checkout\n")
    (repo / "compose.yml").write_text('services:\n  app:\n    image: busybox\n    environment:\n'
                                      '      X: "${SECRET:-none}"\n      Y: "${OWN:-none}"\n')
    normalized = Compose(60, HostEnv.for_state_dir(tmp_path)).normalized(repo / "compose.yml", "p")
    assert normalized["services"]["app"]["environment"] == {"X": "none", "Y": "from-the-checkout"}


@pytest.mark.docker
def test_a_checkout_s_env_file_cannot_turn_compose_to_another_project(tmp_path: Path) -> None:
    """compose copies a `.env`'s COMPOSE_* variables into its environment; when the project then fails to load
    (COMPOSE_DISABLE_ENV_FILE=x), `down` works on COMPOSE_PROJECT_NAME's project instead of --project-name's:
    the service names its own project there too, so the `.env` can name no other preview's."""
    from orchestrator.plugin_api import CommandFailed
    from orchestrator.runtime.compose_cli import Compose
    from tests.support.standins import require_engine

    def docker(*argv: str) -> str:  # the suite's engine (DOCKER_HOST), as the runtime reaches it
        return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120, check=True).stdout

    require_engine()
    victim = f"victim-{tmp_path.name[-12:].lower().replace('_', '-')}"
    (tmp_path / "victim.yml").write_text("services:\n  db:\n    image: po-standin/base:test\n"
                                         "    command: [sleep, '300']\n")
    docker("compose", "--project-name", victim, "--file", str(tmp_path / "victim.yml"), "up", "--detach")
    try:
        repo = tmp_path / "repo"
        repo.mkdir()
        (repo / ".env").write_text(f"COMPOSE_PROJECT_NAME={victim}\nCOMPOSE_DISABLE_ENV_FILE=x\n")
        (repo / "compose.yml").write_text("services:\n  app:\n    image: po-standin/base:test\n")
        try:
            Compose(60, HostEnv.for_state_dir(tmp_path)).down("own-project", repo / "compose.yml", None)
        except CommandFailed:
            pass  # compose cannot load the project: nothing of another's may go either
        assert docker("ps", "--quiet", "--filter", f"label=com.docker.compose.project={victim}").strip()
    finally:
        docker("compose", "--project-name", victim, "down", "--timeout", "0")


@pytest.mark.parametrize(("version", "passes"), [("2.40.3", True), ("2.39.3", True), ("v2.41.0", True),
                                                 ("2.39.2", False), ("2.6.0", False), ("3.0.0", False),
                                                 ("5.0.1", False), ("", False)])
def test_doctor_wants_a_compose_that_keeps_a_checkout_s_env_file_to_itself(
        monkeypatch: pytest.MonkeyPatch, version: str, passes: bool) -> None:
    """Below 2.39.3 compose copied a `.env`'s every variable into its own environment; from 3 on it builds through
    buildx bake, whatever COMPOSE_BAKE says: doctor, which the service runs at start, stops it on either."""
    from orchestrator.cli import doctor

    monkeypatch.setattr(doctor, "compose_program", lambda env: ["docker-compose"])
    monkeypatch.setattr(doctor, "_command", lambda argv, env: (True, version))
    check = doctor._compose(HostEnv.for_state_dir(Path("/tmp"), {}))
    assert check.ok is passes and check.hard
