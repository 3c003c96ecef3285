"""The deploy engine's own rules with real parts: the preview limit, start-up reconciliation, the TTL and a
cleanup that finishes its job whatever is already gone."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.adapters.nginx import APP_HEADER_RULE
from orchestrator.common.labels import DEPLOYMENT_LABEL
from orchestrator.events.cleanup_retry import CleanupRetryScheduler
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.events.ttl import TtlScheduler
from orchestrator.flows.cleanup import RETRY_PREFIX
from orchestrator.flows.engine import INTERRUPTED, DeployEngine
from orchestrator.flows.handler import FlowError
from orchestrator.state.records import DeploymentRecord, PortAllocation, PullRequestEvent, StoreFile
from tests.conftest import SettingsFactory
from tests.support.engines import engine_for
from tests.support.fake_codehost import FakeCodeHost
from tests.support.standins import require_engine

pytestmark = pytest.mark.docker


@pytest.fixture
def codehost() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost().start()
    yield fake
    fake.stop()


def make_engine(make_settings: SettingsFactory, codehost: FakeCodeHost, **overrides: object) -> DeployEngine:
    values = {"codehost_api_url": codehost.url, "proxy_listen_port": 1,
              "proxy_test_command": "true", "proxy_reload_command": "true",
              "codehost_retry_base_seconds": 0.0, **overrides}
    return engine_for(make_settings(**values))


def record(pr: int, status: str = "running", age_days: float = 0) -> DeploymentRecord:
    when = datetime.now(UTC) - timedelta(days=age_days)
    return DeploymentRecord(
        prNumber=pr, repoName="api", repoOwner="acme", projectSlug="acme-api", deploymentId=f"acme-api-{pr}",
        branch="main", commitSha="a" * 40, framework="go", dbType="postgres", appPort=8080,
        exposedAppPort=8000 + pr, exposedDbPort=9000 + pr, status=status, createdAt=when, updatedAt=when,
        url=f"http://localhost/acme-api/pr-{pr}/", commentId=None,
    )


def seed(engine: DeployEngine, *records: DeploymentRecord) -> None:
    def change(data: StoreFile) -> None:
        for item in records:
            data.deployments[item.deploymentId] = item
            data.portAllocations[item.deploymentId] = PortAllocation(
                exposedAppPort=item.exposedAppPort, exposedDbPort=item.exposedDbPort)

    engine.store.update(change)


def event(action: str, pr: int, head_repo: str = "acme/api") -> PullRequestEvent:
    return PullRequestEvent(
        delivery_id=f"{action}-{pr}", action=action, deployment_id=f"acme-api-{pr}", project_slug="acme-api",
        repo_owner="acme", repo_name="api", pr_number=pr, branch="main", commit_sha="b" * 40,
        clone_url="/nonexistent.git", head_repo_full_name=head_repo, received_at=datetime.now(UTC),
    )


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=120).stdout.strip()


def test_a_deploy_beyond_the_limit_fails_before_touching_anything(make_settings, codehost) -> None:  # noqa: ANN001
    engine = make_engine(make_settings, codehost, max_concurrent_previews=1)
    seed(engine, record(1))
    with pytest.raises(FlowError, match="Preview limit reached: 1 previews exist"):
        engine.handle(event("opened", 2))
    assert set(engine.store.read().deployments) == {"acme-api-1"}
    assert set(engine.store.read().portAllocations) == {"acme-api-1"}
    assert not (engine.settings.deployments_dir / "acme-api" / "pr-2").exists()
    [comment] = codehost.comments_on("acme", "api", 2)
    assert "Preview limit reached" in comment["body"]
    with pytest.raises(FlowError, match="Preview limit reached"):
        engine.handle(event("synchronize", 2))  # the next push: the same comment, edited
    [comment] = codehost.comments_on("acme", "api", 2)
    assert comment["edits"] == 1


def test_a_pull_request_number_beyond_the_port_rule_is_refused_with_one_comment(make_settings, codehost) -> None:  # noqa: ANN001
    engine = make_engine(make_settings, codehost)
    for action in ("opened", "synchronize", "synchronize"):
        with pytest.raises(FlowError, match="Port allocation out of range"):
            engine.handle(event(action, 56_001))
    [comment] = codehost.comments_on("acme", "api", 56_001)
    assert "Port allocation out of range" in comment["body"] and comment["edits"] == 2
    assert engine.store.read() == StoreFile()


def test_startup_settles_interrupted_builds_and_removes_orphans(make_settings, codehost) -> None:  # noqa: ANN001
    require_engine()
    engine = make_engine(make_settings, codehost)
    github = engine.codehosts.get("github")
    assert github is not None
    comment = github.upsert_comment("acme", "api", 1, None, "building")
    reported = github.start_deployment("acme", "api", "a" * 40, "preview/acme-api/pr-1", "preview")
    interrupted = record(1, "building").model_copy(update={"commentId": comment, "codehostDeploymentId": reported})
    seed(engine, interrupted, record(2, "building"), record(3, "running"), record(6, "sleeping"))
    label = f"{DEPLOYMENT_LABEL}=ghost-repo-9"
    container = docker("run", "-d", "--label", label, "po-standin/base:test", "sleep", "300")
    docker("volume", "create", "--label", label, "ghost-repo-9_data")
    docker("network", "create", "--label", label, "ghost-repo-9_default")
    routes = engine.settings.proxy_config_dir
    routes.mkdir(parents=True)
    (routes / "ghost-repo-pr-9.conf").write_text("# orphan\n")
    (routes / "acme-api-pr-3.conf").write_text("# kept\n")
    # a route an older version wrote: it honours the app's X-Accel-* headers; start-up writes today's
    older = engine.context.proxy.route("acme-api", 6, "acme-api-6", 8006, guarded=False,
                                       subject=record(6).subject).replace(f"    {APP_HEADER_RULE}\n", "")
    (routes / "acme-api-pr-6.conf").write_text(older)
    (routes / "servers").mkdir()
    (routes / "servers" / "ghost-repo-pr-9.conf").write_text("# orphan of host routing\n")
    (routes / "activity").mkdir()
    for name in ("ghost-repo-pr-9.log", "acme-api-pr-6.log"):  # sleep's activity files: an orphan, a kept one
        (routes / "activity" / name).write_text("")
    orphan_dir = engine.settings.deployments_dir / "ghost-repo" / "pr-9"
    kept_dir = engine.settings.deployments_dir / "acme-api" / "pr-3"
    orphan_dir.mkdir(parents=True)
    kept_dir.mkdir(parents=True)
    kept_build = kept_dir.with_name("pr-3.build")  # its keyed Dockerfiles (rendering/dockerfile_cache.py)
    kept_build.mkdir()
    orphan_build = orphan_dir.with_name("pr-9.build")
    orphan_build.mkdir()

    engine.startup(open_deployments={"acme-api-2"})
    assert engine.reconciler.reports is not None
    engine.reconciler.reports.join(timeout=60)

    deployments = engine.store.read().deployments
    assert deployments["acme-api-1"].status == "failed" and deployments["acme-api-1"].error == INTERRUPTED
    # the pull request hears of it too: its comment and its code-host deployment say failed
    [comment] = codehost.comments_on("acme", "api", 1)
    assert "Preview failed" in comment["body"] and INTERRUPTED in comment["body"] and comment["edits"] == 1
    [reported] = codehost.deployments_of("acme", "api", "preview/acme-api/pr-1")
    assert [s["state"] for s in reported["statuses"]] == ["failure"]
    assert deployments["acme-api-2"].status == "building"  # its event runs again
    assert deployments["acme-api-3"].status == "running"
    assert deployments["acme-api-6"].status == "sleeping"  # stays asleep until a request wakes it
    assert docker("ps", "-aq", "--filter", f"id={container}") == ""
    assert docker("volume", "ls", "-q", "--filter", f"label={label}") == ""
    assert docker("network", "ls", "-q", "--filter", f"label={label}") == ""
    assert not (routes / "ghost-repo-pr-9.conf").exists() and (routes / "acme-api-pr-3.conf").exists()
    assert not (routes / "servers" / "ghost-repo-pr-9.conf").exists()
    assert not (routes / "activity" / "ghost-repo-pr-9.log").exists()
    assert (routes / "activity" / "acme-api-pr-6.log").exists()
    renewed = (routes / "acme-api-pr-6.conf").read_text()
    assert APP_HEADER_RULE in renewed and "proxy_pass http://127.0.0.1:8006/;" in renewed  # where it proxied
    assert not orphan_dir.exists() and kept_dir.exists()
    assert not orphan_build.exists() and kept_build.exists()


def test_startup_answers_before_a_slow_code_host_hears_of_interrupted_builds(make_settings, codehost) -> None:  # noqa: ANN001
    """With the code host failing, each report is retried; start-up (which the HTTP server waits for) must not."""
    engine = make_engine(make_settings, codehost, codehost_retry_base_seconds=0.5)
    comment = engine.codehosts.get("github").upsert_comment("acme", "api", 1, None, "building")
    seed(engine, *(record(pr, "building").model_copy(update={"commentId": comment}) for pr in (1, 4, 5)))
    codehost.fail_next(3, 502)  # the first report is retried three times (0.5 s, 1 s, 2 s), then posted
    engine.startup(open_deployments=set())
    # settled at once; the reports are still retrying in the background
    assert {r.status for r in engine.store.read().deployments.values()} == {"failed"}
    assert engine.reconciler.reports is not None and engine.reconciler.reports.is_alive()
    engine.reconciler.reports.join(timeout=120)
    [posted] = codehost.comments_on("acme", "api", 1)
    assert INTERRUPTED in posted["body"]


def test_ttl_queues_one_cleanup_per_expired_preview(make_settings, codehost, tmp_path: Path) -> None:  # noqa: ANN001
    engine = make_engine(make_settings, codehost, cleanup_ttl_days=7)
    seed(engine, record(1, age_days=8), record(2, age_days=6.9), record(3, "sleeping", age_days=8))
    inbox = Inbox(tmp_path / "inbox.sqlite3")

    async def check_twice() -> tuple[int, int]:
        scheduler = TtlScheduler(engine.expired, inbox, Dispatcher(inbox, engine, 1), 3600)
        return await scheduler.check(), await scheduler.check()

    assert asyncio.run(check_twice()) == (2, 0)  # a sleeping preview expires like a running one
    claimed = [inbox.claim_next([]), inbox.claim_next([])]
    assert {(c.event.action, c.event.deployment_id) for c in claimed} == {("closed", "acme-api-1"),
                                                                          ("closed", "acme-api-3")}
    assert inbox.claim_next([]) is None
    disabled = make_engine(make_settings, codehost, cleanup_ttl_days=0)
    assert disabled.expired(datetime.now(UTC) + timedelta(days=365)) == []


def test_cleanup_finishes_when_everything_is_already_gone(make_settings, codehost) -> None:  # noqa: ANN001
    require_engine()
    engine = make_engine(make_settings, codehost)
    seed(engine, record(4))
    engine.handle(event("closed", 4))
    assert engine.store.read() == StoreFile()


def test_cleanup_reports_what_it_left_removes_the_rest_keeps_the_record_and_is_retried(make_settings, codehost,  # noqa: ANN001
                                                                                       tmp_path: Path) -> None:
    require_engine()
    engine = make_engine(make_settings, codehost, proxy_reload_command="false")
    seed(engine, record(5))
    route = engine.proxy.path("acme-api", 5)
    route.parent.mkdir(parents=True)
    route.write_text("# route\n")
    work = engine.settings.deployments_dir / "acme-api" / "pr-5"
    work.mkdir(parents=True)
    with pytest.raises(FlowError, match="Cleanup incomplete: proxy"):
        engine.handle(event("closed", 5))
    assert not route.exists() and not work.exists()
    # Nothing is forgotten while something is left: the record (with what is left) and its ports stay.
    kept = engine.store.read()
    assert kept.deployments["acme-api-5"].status == "failed"
    assert kept.deployments["acme-api-5"].error.startswith("Cleanup incomplete: proxy")
    assert "acme-api-5" in kept.portAllocations
    # The cleanup is queued again by the retry (once while it waits), and finishes once nginx reloads again.
    reloads = engine.settings.deployments_dir.parent / "reloads"
    retry = make_engine(make_settings, codehost, proxy_reload_command=f"sh -c 'echo reload >> {reloads}'")
    inbox = Inbox(tmp_path / "inbox.sqlite3")

    async def check_twice() -> tuple[int, int]:
        scheduler = CleanupRetryScheduler(retry.unfinished_cleanups, inbox, Dispatcher(inbox, retry, 1), 300)
        return await scheduler.check(), await scheduler.check(datetime.now(UTC) + timedelta(seconds=300))

    assert asyncio.run(check_twice()) == (1, 0)
    claimed = inbox.claim_next([])
    assert claimed is not None and (claimed.event.action, claimed.event.deployment_id) == ("closed", "acme-api-5")
    assert inbox.claim_next([]) is None
    retry.handle(claimed.event)
    assert retry.store.read() == StoreFile()
    assert reloads.read_text() == "reload\n"  # nginx may still serve the route the failed reload kept
    assert retry.unfinished_cleanups() == []


def test_a_cleanup_retry_never_undoes_what_a_webhook_asked_for(make_settings, codehost, tmp_path: Path) -> None:  # noqa: ANN001
    """A `reopened` waiting in the inbox is neither cancelled nor followed by a retry; a retry queued before the
    reopen finds the preview running when its turn comes, and leaves it."""
    engine = make_engine(make_settings, codehost)
    seed(engine, record(6, "failed").model_copy(update={"error": "Cleanup incomplete: node w1: the preview's "
                                                                  "volumes stay there (the node is down)"}))
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    reopened = inbox.accept(event("reopened", 6))
    scheduler = CleanupRetryScheduler(engine.unfinished_cleanups, inbox, Dispatcher(inbox, engine, 1), 300)
    assert asyncio.run(scheduler.check()) == 0
    claimed = inbox.claim_next([])
    assert claimed is not None and claimed.seq == reopened.seq and claimed.event.action == "reopened"
    inbox.finish(claimed.seq, None)
    assert asyncio.run(scheduler.check()) == 1  # idle again: queued
    retried = inbox.claim_next([])
    assert retried is not None and retried.event.delivery_id.startswith(RETRY_PREFIX)
    seed(engine, record(6, "running"))  # meanwhile the reopen deployed it
    engine.handle(retried.event)
    assert engine.store.read().deployments["acme-api-6"].status == "running"


@pytest.mark.parametrize("head_repo", ["stranger/api", None])
def test_fork_pull_requests_get_one_comment_and_nothing_else(make_settings, codehost, head_repo) -> None:  # noqa: ANN001
    engine = make_engine(make_settings, codehost)
    engine.handle(event("opened", 6, head_repo=head_repo))
    engine.handle(event("synchronize", 6, head_repo=head_repo))
    [comment] = codehost.comments_on("acme", "api", 6)
    assert "forks are not deployed" in comment["body"] and comment["edits"] == 0
    assert engine.store.read() == StoreFile()
    assert not engine.settings.deployments_dir.exists()


def test_forks_are_deployed_when_allowed(make_settings, codehost) -> None:  # noqa: ANN001
    engine = make_engine(make_settings, codehost, allow_fork_prs=True, allowed_clone_protocols="file")
    with pytest.raises(FlowError, match="Git clone or checkout failed"):
        engine.handle(event("opened", 7, head_repo="stranger/api"))
    assert engine.store.read().deployments["acme-api-7"].status == "failed"


def test_database_passwords_do_not_follow_the_webhook_secret(make_settings, codehost, tmp_path: Path) -> None:  # noqa: ANN001
    first = make_engine(make_settings, codehost, codehost_webhook_secret="secret-one")
    key = first.password_key()
    path = first.settings.db_password_key_path
    assert path.stat().st_mode & 0o777 == 0o600
    assert key not in (b"secret-one",) and len(key) >= 32
    rotated = make_engine(make_settings, codehost, codehost_webhook_secret="secret-two")
    assert rotated.password_key() == key  # rotating the secret keeps every preview's database password


def test_a_host_with_previews_from_before_keeps_their_passwords(make_settings, codehost) -> None:  # noqa: ANN001
    engine = make_engine(make_settings, codehost, codehost_webhook_secret="the-old-secret")
    seed(engine, record(1))
    assert not engine.settings.db_password_key_path.exists()
    # earlier versions derived the password from the webhook secret: the key starts as that secret
    assert engine.password_key() == b"the-old-secret"
    assert engine.settings.db_password_key_path.read_bytes() == b"the-old-secret"
