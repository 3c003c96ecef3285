"""A restart (orchestrator/flows/restart.py): a preview whose links moved, or whose database was reset, starts again
at the commit it runs without fetching or building, when its checkout and its images are there; anything missing
makes it an ordinary update. Through the real flows, git and renderer, with the seam's recording runtime."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from orchestrator.flows import comments
from orchestrator.flows.engine import DeployEngine
from orchestrator.plugin_api import DeploymentLog, FlowControl
from orchestrator.state.records import PullRequestEvent
from tests import test_runtime_seam as seam
from tests.conftest import SettingsFactory
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.repos import config_for
from tests.test_runtime_seam import RecordingRuntime, engine_with, event

# The seam's fixtures: an app that answers, the fake code host, no nginx to wait for.
app_server, codehost, no_nginx_here = seam.app_server, seam.codehost, seam.no_nginx_here


class KeepingRuntime(RecordingRuntime):
    """Says whether its images are there (`images`), and what compose file each start was given."""

    def __init__(self, app_port: int) -> None:
        super().__init__(app_port)
        self.images = True
        self.started_with: list[str] = []

    def has_images(self, deployment_id: str, compose_file: Path) -> bool:
        self.calls.append(("has_images", deployment_id))
        return self.images

    def start(self, deployment_id: str, compose_file: Path, log: DeploymentLog, control: FlowControl) -> None:
        super().start(deployment_id, compose_file, log, control)
        self.started_with.append(compose_file.read_text())

    def reset_database(self, deployment_id: str, compose_file: Path, log: DeploymentLog) -> list[str]:
        self.calls.append(("reset_database", deployment_id))
        return ["db-data"]


def relink(repo: PullRequestRepo, sha: str) -> PullRequestEvent:
    return event("synchronize", repo, sha).model_copy(
        update={"trigger": "relink", "delivery_id": f"relink-{time.time_ns()}"})


def unreachable(repo: PullRequestRepo) -> Path:
    """The repository moved away: a fetch from it fails."""
    return Path(shutil.move(repo.clone_url, f"{repo.clone_url}.away"))


def deployed(runtime: KeepingRuntime, make_settings: SettingsFactory, codehost: FakeCodeHost,
             tmp_path: Path) -> tuple[DeployEngine, PullRequestRepo]:
    engine, _ = engine_with(runtime, make_settings, codehost)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/seam", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    assert ("build", "acme-api-3") in runtime.calls
    runtime.calls.clear()
    return engine, repo


def test_a_relinked_preview_restarts_at_its_commit_fetching_and_building_nothing(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    runtime = KeepingRuntime(app_server)
    engine, repo = deployed(runtime, make_settings, codehost, tmp_path)
    unreachable(repo)  # a fetch would fail the restart

    engine.handle(relink(repo, repo.sha_a))
    assert [name for name, _ in runtime.calls] == ["has_images", "start", "app_url", "logs"]
    record = engine.store.read().deployments["acme-api-3"]
    assert (record.status, record.commitSha) == ("running", repo.sha_a)
    assert "acme-api-pr-3-app" in runtime.started_with[-1]  # started from a compose file rendered again
    log = (tmp_path / "deployments" / "acme-api" / "pr-3.log").read_text()
    assert f"restart at {repo.sha_a}: checked out again, not fetched" in log
    assert "restart: the images of the last build kept, nothing built" in log
    ready = codehost.comments_on("acme", "api", 3)[-1]["body"]
    assert comments.TRIGGERS["relink"] in ready and "Preview ready" in ready


def test_a_restart_whose_images_are_gone_builds_them_from_the_checkout_without_fetching(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    runtime = KeepingRuntime(app_server)
    engine, repo = deployed(runtime, make_settings, codehost, tmp_path)
    unreachable(repo)
    runtime.images = False
    engine.handle(relink(repo, repo.sha_a))
    assert [name for name, _ in runtime.calls] == ["has_images", "build", "start", "app_url", "logs"]
    assert engine.store.read().deployments["acme-api-3"].status == "running"
    log = (tmp_path / "deployments" / "acme-api" / "pr-3.log").read_text()
    assert "restart: the images of the last build are gone; built again" in log


def test_a_restart_without_its_checkout_clones_as_an_update(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    runtime = KeepingRuntime(app_server)
    engine, repo = deployed(runtime, make_settings, codehost, tmp_path)
    shutil.rmtree(tmp_path / "deployments" / "acme-api" / "pr-3")
    engine.handle(relink(repo, repo.sha_a))
    assert engine.store.read().deployments["acme-api-3"].status == "running"
    assert "restart: no checkout of the last deploy; cloned again" in \
        (tmp_path / "deployments" / "acme-api" / "pr-3.log").read_text()

    moved = unreachable(repo)  # that clone needed the repository: without it, the restart fails as an update would
    shutil.rmtree(tmp_path / "deployments" / "acme-api" / "pr-3")
    try:
        engine.handle(relink(repo, repo.sha_a))
    except Exception as exc:  # noqa: BLE001 - the flow's FlowError, with the spec's message
        assert "Git clone or checkout failed" in str(exc)
    else:
        raise AssertionError("a restart without its checkout passed without its repository: it did not clone")
    finally:
        shutil.move(moved, repo.clone_url)


def test_a_relink_of_a_commit_the_preview_no_longer_runs_does_nothing(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    """A push came between the look and the restart: the push's deploy resolved the links; the look's stale commit
    is never deployed over it."""
    runtime = KeepingRuntime(app_server)
    engine, repo = deployed(runtime, make_settings, codehost, tmp_path)
    engine.handle(event("synchronize", repo, repo.sha_b))
    runtime.calls.clear()
    engine.handle(relink(repo, repo.sha_a))
    assert runtime.calls == []
    assert engine.store.read().deployments["acme-api-3"].commitSha == repo.sha_b


def test_reset_db_restarts_the_preview_on_a_new_database_without_building(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:
    runtime = KeepingRuntime(app_server)
    engine, repo = deployed(runtime, make_settings, codehost, tmp_path)
    unreachable(repo)
    reset = event("command", repo, repo.sha_a).model_copy(update={
        "command": "reset-db", "trigger": "operator", "command_author": "operator", "delivery_id": "reset-1"})
    engine.handle(reset)
    assert [name for name, _ in runtime.calls] == ["reset_database", "has_images", "start", "app_url", "logs"]
    assert engine.store.read().deployments["acme-api-3"].status == "running"
