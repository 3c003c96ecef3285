"""The runtime watch: a running preview its runtime reports lost (a swarm node that left) is marked failed,
with the reason in the record and the comment; a runtime that cannot tell, and a preview a flow took over
meanwhile, are left alone."""

from __future__ import annotations

from pathlib import Path

from orchestrator.flows.records import mark_lost
from tests.conftest import SettingsFactory
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import make_pr_repo
from tests.support.repos import config_for
from tests.test_runtime_seam import RecordingRuntime, app_server, codehost, engine_with, event  # noqa: F401

LOST = "The preview's swarm node worker2 is down (it left the swarm or its engine stopped); push a commit to " \
       "deploy it on another node"


class LosingRuntime(RecordingRuntime):
    def __init__(self, app_port: int) -> None:
        super().__init__(app_port)
        self.lost: dict[str, str] = {}

    def lost_previews(self, deployment_ids: list[str]) -> dict[str, str]:
        self.calls.append(("lost_previews", ",".join(deployment_ids)))
        return {key: value for key, value in self.lost.items() if key in deployment_ids}


def test_a_running_preview_the_runtime_reports_lost_is_failed_and_the_pull_request_told(
        make_settings: SettingsFactory, codehost: FakeCodeHost, app_server: int, tmp_path: Path) -> None:  # noqa: F811
    runtime = LosingRuntime(app_server)
    engine, _ = engine_with(runtime, make_settings, codehost)  # type: ignore[arg-type]
    repo = make_pr_repo(tmp_path / "git", "go", "feature/watch", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    assert engine.watch() == 0  # nothing lost
    runtime.lost = {"acme-api-3": LOST}
    assert engine.watch() == 1
    record = engine.store.read().deployments["acme-api-3"]
    assert record.status == "failed" and record.error == LOST
    [comment] = [c["body"] for c in codehost.comments_on("acme", "api", 3)]
    assert "Preview failed" in comment and "worker2 is down" in comment
    assert engine.watch() == 0  # reported once: it is no longer running


def test_a_preview_a_flow_took_over_is_not_marked(make_settings: SettingsFactory, codehost: FakeCodeHost,  # noqa: F811
                                                  app_server: int, tmp_path: Path) -> None:  # noqa: F811
    runtime = LosingRuntime(app_server)
    engine, _ = engine_with(runtime, make_settings, codehost)  # type: ignore[arg-type]
    repo = make_pr_repo(tmp_path / "git", "go", "feature/watch", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    seen = engine.store.read().deployments["acme-api-3"]
    engine.handle(event("synchronize", repo, repo.sha_b))  # a deploy since: another updatedAt
    assert not mark_lost(engine.store, seen, LOST)
    assert engine.store.read().deployments["acme-api-3"].status == "running"


def test_a_runtime_that_cannot_tell_is_not_asked(make_settings: SettingsFactory, codehost: FakeCodeHost,  # noqa: F811
                                                 app_server: int, tmp_path: Path) -> None:  # noqa: F811
    runtime = RecordingRuntime(app_server)
    engine, _ = engine_with(runtime, make_settings, codehost)
    repo = make_pr_repo(tmp_path / "git", "go", "feature/watch", config_for("go", "postgres"))
    engine.handle(event("opened", repo, repo.sha_a))
    runtime.calls.clear()
    assert engine.watch() == 0 and runtime.calls == []
