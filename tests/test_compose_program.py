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
    """compose reads a checkout's `.env`, and compose 2.31 to 2.39.3 also copied it into its own environment wherever
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
