"""The guard that keeps the engine tests off the machine's default engine (tests/support/test_engine.py): a test
marked `docker` or `swarm` fails at once, saying how to run it, unless it runs in the suite's own engine's
network namespace with that engine's DOCKER_HOST (issue 30)."""

from __future__ import annotations

import configparser
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


def engine_of(**variables: str) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", **variables}
    printed = subprocess.run([str(REPO_ROOT / "scripts" / "test-engine"), "env"], capture_output=True, text=True,
                             timeout=30, env=env, check=True).stdout
    return dict(line.split("=", 1) for line in printed.splitlines())


def test_each_run_name_has_an_engine_of_its_own_and_the_checkout_one_of_its_own() -> None:
    """Two runs side by side (tox's environments) share nothing of an engine: socket, namespace, data root."""
    checkout, fw_go, db_mysql = engine_of(), engine_of(PO_TEST_RUN="fw-go"), engine_of(PO_TEST_RUN="db-mysql")
    for name in ("DOCKER_HOST", "PO_TEST_NETNS", "PO_TEST_ENGINE_PIDFILE", "PO_TEST_ENGINE_LOG"):
        assert len({checkout[name], fw_go[name], db_mysql[name]}) == 3, name
    assert engine_of(PO_TEST_RUN="fw-go") == fw_go  # the same run name finds its engine again
    assert engine_of(PO_TEST_RUN="fw-go", PO_TEST_ENGINE="abc") == engine_of(PO_TEST_ENGINE="abc")


def test_a_run_name_that_could_reach_a_path_or_a_command_is_refused() -> None:
    result = subprocess.run([str(REPO_ROOT / "scripts" / "test-engine"), "env"], capture_output=True, text=True,
                            timeout=30, env={"PATH": "/usr/bin:/bin", "PO_TEST_RUN": "../x y"})
    assert result.returncode == 1 and "PO_TEST_RUN must be" in result.stderr and not result.stdout


def test_every_tox_environment_that_deploys_prepares_and_uses_an_engine_of_its_own() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO_ROOT / "tox.ini")
    assert "PO_TEST_RUN = {envname}" in tox["testenv"]["set_env"]
    assert "PO_TEST_ENGINE" not in tox["testenv"]["pass_env"]  # it would name one engine for them all
    engine_envs = [name for name in tox.sections() if "scripts/test-engine exec" in tox[name].get("commands", "")]
    assert len(engine_envs) >= 4, engine_envs  # fw-*, db-*, e2e, bench
    for name in engine_envs:
        assert "{toxinidir}/scripts/prepare-test-host" in tox[name]["commands_pre"], name
        assert "set_env" not in tox[name] or "PO_TEST_RUN" not in tox[name]["set_env"], name


def test_the_other_lanes_take_existing_modules_and_every_test_that_stops_its_engine() -> None:
    """scripts/test's second and third lanes (engines of their own) name real modules, none twice; a module that
    stops the suite's engine runs there, never in the first engine, whose stand-ins the swarm's tests and the other
    engines load."""
    import re

    script = (REPO_ROOT / "scripts" / "test").read_text()
    lanes = {}
    for name in ("second", "third"):
        listed = re.search(rf"^{name}=\(([^)]*)\)", script, re.MULTILINE)
        assert listed is not None, name
        lanes[name] = set(listed.group(1).split())
        assert lanes[name] and all((REPO_ROOT / module).is_file() for module in lanes[name]), lanes[name]
    assert not lanes["second"] & lanes["third"]
    for name in ("second", "third"):  # the first lane runs everything else: it ignores both lists
        assert f'"${{{name}[@]/#/--ignore=}}"' in script, name
    stopping = {f"tests/{path.name}" for path in (REPO_ROOT / "tests").glob("test_*.py")
                if re.search(r"^\s+stop_engine\(\)", path.read_text(), re.MULTILINE)}
    assert stopping and stopping <= lanes["second"] | lanes["third"], stopping - lanes["second"] - lanes["third"]
