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
