from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from falcon import testing

from orchestrator.http.app import create_app
from orchestrator.settings import Settings, load_settings
from orchestrator.state.store import DeploymentStore
from tests.support.handlers import RecordingHandler
from tests.support.payloads import FIXTURE_REPO, SECRET
from tests.support.test_engine import engine_problem

SettingsFactory = Callable[..., Settings]
OwnEnv = Callable[..., None]

# The code host reconcile (on by default) would ask CODEHOST_API_URL — api.github.com unless a test says otherwise —
# at every app's start-up: tests that want it set RECONCILE_INTERVAL_MINUTES themselves (tests/test_reconcile*.py).
os.environ["RECONCILE_INTERVAL_MINUTES"] = "0"


@pytest.fixture
def make_settings(tmp_path: Path) -> SettingsFactory:
    def factory(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "_env_file": None,
            "codehost_webhook_secret": SECRET,
            "codehost_token": "test-token-abcdef",
            "allowed_repos": FIXTURE_REPO,
            "deployments_db": tmp_path / "state" / "deployments.json",
            "deployments_dir": tmp_path / "deployments",
            "proxy_config_dir": tmp_path / "proxy",
            "log_level": "debug",
        }
        values.update(overrides)
        return load_settings(**values)

    return factory


@pytest.fixture
def own_env(monkeypatch: pytest.MonkeyPatch) -> OwnEnv:
    """Set a plugin's own settings, which it reads from the environment when it is built (a code host's GITEA_*,
    GITLAB_*, the swarm runtime's SWARM_*): `own_env(GITEA_WEBHOOK_SECRET="...", GITEA_URL="...")`."""
    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings()


@pytest.fixture
def store(settings: Settings) -> DeploymentStore:
    return DeploymentStore(settings.deployments_db)


@pytest.fixture
def handler(store: DeploymentStore, tmp_path: Path) -> RecordingHandler:
    return RecordingHandler(store=store, journal=tmp_path / "journal.jsonl")


@pytest.fixture
def client(settings: Settings, handler: RecordingHandler) -> testing.TestClient:
    return testing.TestClient(create_app(settings, handler))


@pytest.fixture(scope="session")
def host():  # noqa: ANN201
    """Built-in plugins only: what every installation has."""
    from orchestrator.rendering.plugin_host import build_plugin_host

    return build_plugin_host(load_entry_points=False)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (tox -e unit): two workers per core. Most unit tests wait — on a real nginx, a service process, a
    health probe's pause, git — so one worker per core leaves the cores half idle (on 2 cores: 2 min 17 s with two
    workers, 1 min 36 s with four; docs/benchmarks.md)."""
    return 2 * (os.cpu_count() or 1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--plugin", help="run only the tests of this built-in plugin (framework, database, service): "
                                      "those marked `uses(NAME)` or parametrized with NAME (tox's fw-*/db-*)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that drives Docker fails at once, saying how to run it, unless the suite's own engine is where it
    runs (scripts/test-engine): never the machine's default engine."""
    if item.get_closest_marker("docker") or item.get_closest_marker("swarm"):
        if (problem := engine_problem()) is not None:
            pytest.fail(problem, pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    name = config.getoption("--plugin")
    if not name:
        return
    selected, deselected = [], []
    for item in items:
        (selected if name in plugins_of(item) else deselected).append(item)
    config.hook.pytest_deselected(items=deselected)
    items[:] = selected


def plugins_of(item: pytest.Item) -> set[str]:
    """The plugins a test exercises: its `uses` markers' names and its string parameters."""
    named = {name for marker in item.iter_markers("uses") for name in marker.args}
    params = getattr(getattr(item, "callspec", None), "params", {})
    values = [v for value in params.values() for v in (value if isinstance(value, tuple) else (value,))]
    return named | {value for value in values if isinstance(value, str)}
