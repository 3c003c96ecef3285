"""The guard that keeps the engine tests off the machine's default engine (tests/support/test_engine.py): a test
marked `docker` or `swarm` fails at once, saying how to run it, unless it runs in the suite's own engine's
network namespace with that engine's DOCKER_HOST (issue 30)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.payloads import REPO_ROOT
from tests.support.test_engine import engine_problem


@pytest.mark.parametrize("env", [
    {},  # plain `pytest`: the machine's default engine
    {"DOCKER_HOST": "unix:///var/run/docker.sock", "PO_TEST_NETNS": "po-test-x"},
    {"DOCKER_HOST": "tcp://127.0.0.1:2375", "PO_TEST_NETNS": "po-test-x"},
    {"DOCKER_HOST": "unix:///run/po-test-x/docker.sock"},
])
def test_anything_but_the_suite_s_engine_is_refused(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("PO_TEST_NETNS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    problem = engine_problem()
    assert problem is not None and "scripts/test" in problem


def test_the_right_socket_outside_its_namespace_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/po-test-nowhere/docker.sock")
    monkeypatch.setenv("PO_TEST_NETNS", "po-test-nowhere")  # no such namespace
    assert "is gone" in str(engine_problem())


def test_a_docker_test_run_against_the_default_engine_fails_without_touching_it(tmp_path: Path) -> None:
    test = tmp_path / "test_probe.py"
    test.write_text("import pytest, pathlib\n\n@pytest.mark.docker\ndef test_probe():\n"
                    f"    pathlib.Path({str(tmp_path / 'ran')!r}).touch()\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                             str(REPO_ROOT), "-c", str(REPO_ROOT / "pyproject.toml"), str(test),
                             "--confcutdir", str(REPO_ROOT / "tests"), "-p", "tests.conftest"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=REPO_ROOT)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "never the machine's" in result.stdout
    assert not (tmp_path / "ran").exists()
