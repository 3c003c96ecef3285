"""Base previews (BASE_PREVIEWS; docs/routing.md, "Base previews"): a standing preview of a repository's default
branch, `{projectSlug}-base` at `/{projectSlug}/base/`, deployed when the service starts, following the branch
through git's view of the remote's HEAD, never expired by the TTL, removed when its repository leaves the setting."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.adapters.git import Git
from orchestrator.codehosts.gitea import Gitea
from orchestrator.codehosts.github import GitHub
from orchestrator.codehosts.gitlab import GitLab
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import (
    BASE,
    deployment_id,
    is_valid_deployment_id,
    parse_deployment_id,
    preview_host_label,
    preview_segment,
)
from orchestrator.events.gating import Gate
from orchestrator.events.webhook import parse_delivery
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.api_client import ApiClient
from orchestrator.plugin_api.deliveries import Delivery, Ignored, WebhookRejected
from orchestrator.settings import SettingsError
from orchestrator.state.records import PullRequestEvent, StoreFile
from orchestrator.state.store import DeploymentStore
from tests.conftest import SettingsFactory
from tests.support import web
from tests.support.engines import engine_for
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo, git, make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import SECRET, fixture_bytes, push_payload, webhook_headers
from tests.support.records import sample_record, track
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack
from tests.test_reconcile import github

BASE_ID = f"{SLUG}-base"
SHA_A = "a" * 40


# Names ----------------------------------------------------------------------------------------------------------


def test_a_base_preview_is_named_base_wherever_a_pull_request_s_number_goes() -> None:
    assert deployment_id("acme-api", BASE) == "acme-api-base" and preview_segment(BASE) == "base"
    assert parse_deployment_id("acme-api-base") == ("acme-api", BASE)
    assert parse_deployment_id("acme-api-12") == ("acme-api", 12)
    for valid in ("acme-api-base", "acme-base-base", "acme-api-7"):
        assert is_valid_deployment_id(valid)
    for invalid in ("acme-api-Base", "-base", "acme-api-0", "acme-api-base-", "acme-api-bases"):
        assert not is_valid_deployment_id(invalid)
        with pytest.raises(ValueError, match="is not a deployment id"):
            parse_deployment_id(invalid)
    # a base's host label never equals a pull request's (one ends in a digit), shortened or not
    long_slug = "acme-" + "x" * 90
    bases = {preview_host_label(slug, BASE) for slug in ("acme-api", long_slug, "acme-api-pr-1")}
    pulls = {preview_host_label(slug, pr) for slug in ("acme-api", long_slug, "acme-api-base", "acme") for pr in
             (1, 12)}
    assert not bases & pulls and all(len(label) <= 63 for label in bases)
    assert preview_host_label(long_slug, BASE).endswith("-base") and "--" in preview_host_label(long_slug, BASE)


def test_base_previews_must_be_allowed_repositories(make_settings: SettingsFactory) -> None:
    settings = make_settings(allowed_repos="acme/api,gitea:team/web", base_previews="Acme/API, gitea:team/web")
    assert settings.base_for("github") == {"acme/api"} and settings.base_for("gitea") == {"team/web"}
    with pytest.raises((SettingsError, ValueError), match="BASE_PREVIEWS names github:acme/web, not in ALLOWED_REPOS"):
        make_settings(allowed_repos="acme/api", base_previews="acme/web")
    with pytest.raises((SettingsError, ValueError), match="is not of the form owner/repo"):
        make_settings(allowed_repos="acme/api", base_previews="acme")


# What each code host says, and what git says -------------------------------------------------------------------


def test_each_code_host_gives_a_repository_s_clone_url(tmp_path: Path) -> None:
    fake = FakeCodeHost().start()
    gitea, gitlab = FakeCodeHost(prefix="/api/v1").start(), FakeCodeHost(prefix="/api/v4").start()
    try:
        for host in (fake, gitea, gitlab):
            host.repositories[("Acme", "API")] = {"clone_url": f"{host.url}/acme/api.git"}
        assert github(fake).clone_url("acme", "api") == f"{fake.url}/acme/api.git"
        assert github(fake).clone_url("acme", "gone") is None
        gitea_api = ApiClient(f"{gitea.url}/api/v1", {}, retry_base=0.01, metrics=Metrics())
        assert Gitea(gitea_api, gitea.url, "tok", "s" * 20).clone_url("acme", "api") == f"{gitea.url}/acme/api.git"
        gitlab_api = ApiClient(f"{gitlab.url}/api/v4", {}, retry_base=0.01, metrics=Metrics())
        assert GitLab(gitlab_api, gitlab.url, "tok", "s" * 20).clone_url("Acme", "API") == \
            f"{gitlab.url}/acme/api.git"
    finally:
        for host in (fake, gitea, gitlab):
            host.stop()


def base_repo(root: Path, branch: str = "release/main") -> PullRequestRepo:
    """A bare repository whose default branch (its HEAD) is `branch`, at commit A; commit B is there to move to."""
    repo = make_pr_repo(root, "python", branch, config=config_for("python"))
    git(Path(repo.clone_url), "symbolic-ref", "HEAD", f"refs/heads/{branch}")
    git(Path(repo.clone_url), "update-ref", f"refs/heads/{branch}", repo.sha_a)
    return repo


def move_to(repo: PullRequestRepo, sha: str) -> None:
    git(Path(repo.clone_url), "update-ref", f"refs/heads/{repo.branch}", sha)


def test_git_reads_the_default_branch_and_its_head_from_the_remote_s_head(tmp_path: Path) -> None:
    repo = base_repo(tmp_path)
    reader = Git(lambda host, url: None, ("file",), 30, HostEnv.for_state_dir(tmp_path))
    assert reader.remote_head(repo.clone_url, "github") == ("release/main", repo.sha_a)
    move_to(repo, repo.sha_b)
    assert reader.remote_head(repo.clone_url, "github") == ("release/main", repo.sha_b)
    with pytest.raises(Exception, match="not allowed"):
        Git(lambda host, url: None, ("https",), 30, HostEnv.for_state_dir(tmp_path)).remote_head(repo.clone_url,
                                                                                                 "github")


# Pushes ----------------------------------------------------------------------------------------------------------


def delivered(body: bytes, bases: str = "codertocat/hello-world", allowed: str = "codertocat/hello-world") -> Any:
    host = GitHub(ApiClient("http://127.0.0.1:9", {}, metrics=Metrics()), "http://127.0.0.1:9", "tok",
                  SECRET)  # parsing asks the API nothing
    headers = {key.lower(): value for key, value in webhook_headers(body, event="push").items()}
    return parse_delivery(host, Delivery(headers, body), frozenset(allowed.split(",")), Gate(),
                          frozenset(bases.split(",")) if bases else frozenset())


def test_a_push_to_the_default_branch_updates_the_base_preview_and_nothing_else_does() -> None:
    # the real payload: a tag's deletion
    assert isinstance(delivered(fixture_bytes("push.tag-deleted")), Ignored)
    event = delivered(push_payload("refs/heads/main", SHA_A, "/srv/git/hello.git", "main"))
    assert isinstance(event, PullRequestEvent)
    assert (event.action, event.deployment_id, event.pr_number, event.branch, event.commit_sha, event.clone_url) == \
        ("synchronize", BASE_ID, BASE, "main", SHA_A, "/srv/git/hello.git")
    assert event.is_base and not event.from_fork
    other = delivered(push_payload("refs/heads/feature", SHA_A, "/srv/git/hello.git", "main"))
    assert isinstance(other, Ignored) and "not a new head of the default branch" in other.reason
    none = delivered(push_payload("refs/heads/main", SHA_A, "/srv/git/hello.git", "main"), bases="")
    assert isinstance(none, Ignored) and "has no base preview (BASE_PREVIEWS)" in none.reason
    # an organisation's webhook sends every repository's pushes: one not allowed is ignored, not refused
    stranger = delivered(push_payload("refs/heads/main", SHA_A, "/x.git", "main"), allowed="acme/api")
    assert isinstance(stranger, Ignored) and "not in ALLOWED_REPOS" in stranger.reason
    # the push's time is the event's clock: a push delivered after a newer one is stale (events/inbox.py)
    assert event.pr_updated_at == datetime.fromtimestamp(1557933657, UTC)
    with pytest.raises(WebhookRejected) as invalid:
        delivered(push_payload("refs/heads/a..b", SHA_A, "/x.git", "a..b"))
    assert invalid.value.status == 400 and "the default branch name" in invalid.value.message


def gitea_push_body(ref: str, after: str) -> bytes:
    """A Gitea/Forgejo `push` (modules/structs/hook.go PushPayload), with what the service reads."""
    return json.dumps({"ref": ref, "before": "b" * 40, "after": after, "compare_url": "", "commits": [],
                       "total_commits": 0, "repository": {"id": 1, "full_name": "team/api", "name": "api",
                                                          "clone_url": "https://git.example.test/team/api.git",
                                                          "default_branch": "main"},
                       "pusher": {"login": "dev"}, "sender": {"login": "dev"}}).encode()


def gitlab_push_body(ref: str, after: str, checkout_sha: str | None) -> bytes:
    """A GitLab push event (docs.gitlab.com, "Webhook events", "Push events"), with what the service reads."""
    return json.dumps({"object_kind": "push", "event_name": "push", "before": "b" * 40, "after": after, "ref": ref,
                       "checkout_sha": checkout_sha, "user_id": 4, "project_id": 15, "project": {
                           "id": 15, "name": "api", "path_with_namespace": "group/sub/api",
                           "git_http_url": "https://gl.example.test/group/sub/api.git", "default_branch": "main"},
                       "commits": [], "total_commits_count": 0}).encode()


def test_gitea_and_gitlab_pushes_to_the_default_branch_update_the_base_preview() -> None:
    api = ApiClient("http://127.0.0.1:9", {}, metrics=Metrics())
    gitea, gitlab = Gitea(api, "http://127.0.0.1:9", "t", "s" * 20), GitLab(api, "http://127.0.0.1:9", "t", "s" * 20)

    def parsed(host: Any, headers: dict[str, str], body: bytes, repository: str) -> Any:
        return parse_delivery(host, Delivery(headers, body), frozenset({repository}), Gate(), frozenset({repository}))

    gitea_headers = {"x-gitea-event": "push", "x-gitea-delivery": "d-1"}
    event = parsed(gitea, gitea_headers, gitea_push_body("refs/heads/main", SHA_A), "team/api")
    assert (event.deployment_id, event.codehost, event.commit_sha, event.clone_url) == (
        "team-api-base", "gitea", SHA_A, "https://git.example.test/team/api.git")
    assert isinstance(parsed(gitea, gitea_headers, gitea_push_body("refs/heads/main", "0" * 40), "team/api"), Ignored)
    gitlab_headers = {"x-gitlab-event": "Push Hook", "x-gitlab-event-uuid": "u-1"}
    event = parsed(gitlab, gitlab_headers, gitlab_push_body("refs/heads/main", SHA_A, SHA_A), "group/sub/api")
    assert (event.deployment_id, event.repo_owner, event.codehost, event.branch) == (
        "group-sub-api-base", "group/sub", "gitlab", "main")
    deleted = gitlab_push_body("refs/heads/main", "0" * 40, None)
    assert isinstance(parsed(gitlab, gitlab_headers, deleted, "group/sub/api"), Ignored)
    tag = gitlab_push_body("refs/tags/v1", SHA_A, SHA_A)
    assert isinstance(parsed(gitlab, gitlab_headers, tag, "group/sub/api"), Ignored)


# The flows' decisions, without Docker ------------------------------------------------------------------------------


def test_the_ttl_never_expires_a_base_preview_and_a_repository_left_out_loses_its_own(
        make_settings: SettingsFactory, tmp_path: Path) -> None:
    engine = engine_for(make_settings(cleanup_ttl_days=1))
    old = datetime.now(UTC) - timedelta(days=30)
    base, pull = sample_record(BASE, updatedAt=old, branch="main"), sample_record(3, updatedAt=old)
    assert base.deploymentId == "acme-api-base" and base.is_base
    track(tmp_path / "state" / "deployments.json", base, pull)
    assert [record.deploymentId for record in engine.expired(datetime.now(UTC))] == ["acme-api-3"]
    # BASE_PREVIEWS no longer names acme/api: its base preview is removed, and the pull request's is left alone
    [(event, said)] = engine.base_previews()
    assert (event.action, event.deployment_id, event.pr_number) == ("closed", "acme-api-base", BASE)
    assert "acme/api is not in BASE_PREVIEWS" in said


def test_a_base_preview_of_another_repository_with_the_same_slug_is_left_to_it(
        make_settings: SettingsFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = engine_for(make_settings(allowed_repos="acme/web-app,acme-web/app", base_previews="acme/web-app,"
                                                                                               "acme-web/app"))
    theirs = sample_record(BASE, "acme-web", "app", branch="main", cloneUrl="/srv/git/acme-web-app.git")
    track(tmp_path / "state" / "deployments.json", theirs)
    with caplog.at_level("WARNING"):
        due = engine.base_previews()
    # acme-web/app's own look reads its remote (not there: no event); acme/web-app never takes its preview
    assert due == []
    assert "belongs to the repository acme-web/app" in caplog.text


def test_doctor_says_how_each_base_preview_stands(make_settings: SettingsFactory, tmp_path: Path) -> None:
    from orchestrator.cli.doctor_bases import base_previews

    settings = make_settings(allowed_repos="acme/api,gitea:acme/web,acme/docs,acme/web",
                             base_previews="acme/api,gitea:acme/web,acme/docs")
    track(tmp_path / "state" / "deployments.json",
          sample_record(BASE, branch="main", commitSha="b" * 40),
          sample_record(BASE, "acme", "web", branch="trunk", status="failed", codehost="gitea"))
    check = base_previews(settings)
    assert check.detail == ("acme/api: running at main bbbbbbb; gitea:acme/web: failed at trunk aaaaaaa; "
                            "acme/docs: not made yet")
    assert not check.ok and "preview-orchestrator logs acme-web-base" in check.fix and not check.hard
    # GitHub's acme/web has no base preview: Gitea's failed one is not taken for it, nor the other way round
    track(tmp_path / "state" / "deployments.json",
          sample_record(BASE, "acme", "web", branch="trunk", status="running", codehost="gitea"))
    assert base_previews(settings).ok


# End to end: real git, Docker and nginx ---------------------------------------------------------------------------


def asked_for_repository(stack: Stack) -> list[str]:
    """The API calls about the repository itself (the pull requests' reconcile lists them at the same interval)."""
    return [call.path for call in stack.codehost.calls if call.path.startswith("/repos/") and "/pulls" not in call.path]


def base_page(stack: Stack) -> httpx.Response:
    return web.get(f"{stack.nginx.url}/{SLUG}/base/", timeout=10)


@pytest.mark.docker
@pytest.mark.live
def test_a_base_preview_stands_for_the_default_branch_and_follows_it(tmp_path: Path) -> None:
    repo = base_repo(tmp_path / "repos")
    stack = start_stack(tmp_path / "stack", BASE_PREVIEWS="Codertocat/Hello-World", RECONCILE_INTERVAL_MINUTES="0.02")
    stack.codehost.repositories[("Codertocat", "Hello-World")] = {"clone_url": repo.clone_url}
    try:
        record = stack.wait_for(BASE, "running", repo.sha_a)
        assert record["deploymentId"] == BASE_ID and record["branch"] == "release/main"
        assert record["url"] == f"{stack.nginx.url}/{SLUG}/base/"
        assert base_page(stack).text == "python says: commit A\n"
        asked = asked_for_repository(stack)
        assert asked and set(asked) == {"/repos/codertocat/hello-world"}  # its clone URL (asked until it answers)
        # the default branch moves: the base preview follows within a look, through git alone
        move_to(repo, repo.sha_b)
        stack.wait_for(BASE, "running", repo.sha_b)
        wait_until(lambda: base_page(stack).text == "python says: commit B\n", timeout=15, message="page B")
        assert asked_for_repository(stack) == asked
        # no pull request: nothing commented, no deployment status
        assert stack.codehost.comments == {} and stack.codehost.deployments == {}
        dashboard = web.get(f"{stack.service.url}/dashboard", timeout=10).text
        assert "base · release/main" in dashboard
        assert re.search(rf"{BASE_ID}.*running", web.get(f"{stack.service.url}/api/previews",
                                                            timeout=10).text)
        # DELETE removes it like any preview, and the next look makes it again. Meanwhile the code host does not
        # know the repository (the look finds no clone URL: no record keeps one now), so that no look makes it again
        # while its removal is checked.
        known = stack.codehost.repositories.pop(("Codertocat", "Hello-World"))
        assert web.delete(f"{stack.service.url}/api/previews/{BASE_ID}", timeout=30).status_code == 200
        stack.wait_gone(BASE)
        assert_fully_removed(stack, BASE)
        stack.codehost.repositories[("Codertocat", "Hello-World")] = known
        stack.wait_for(BASE, "running", repo.sha_b)
    finally:
        stop_stack(stack)


@pytest.mark.docker
@pytest.mark.live
def test_a_push_webhook_moves_the_base_preview_without_waiting_for_a_look(tmp_path: Path) -> None:
    repo = base_repo(tmp_path / "repos", "main")
    # The reconcile is off, and the fake code host does not know the repository: the look at start-up finds no
    # clone URL, so only the push (which carries one) can make the base preview and move it.
    stack = start_stack(tmp_path / "stack", BASE_PREVIEWS="Codertocat/Hello-World", RECONCILE_INTERVAL_MINUTES="0",
                        CLEANUP_TTL_DAYS="1", TTL_CHECK_INTERVAL_SECONDS="1")
    try:
        move_to(repo, repo.sha_b)
        body = push_payload("refs/heads/main", repo.sha_b, repo.clone_url, "main")
        answer = web.post(f"{stack.service.url}/webhook/codehost", content=body,
                          headers=webhook_headers(body, event="push"), timeout=10)
        assert answer.status_code == 200, answer.text
        stack.wait_for(BASE, "running", repo.sha_b)
        wait_until(lambda: base_page(stack).text == "python says: commit B\n", timeout=15, message="page B")
        assert asked_for_repository(stack) == ["/repos/codertocat/hello-world"]  # the look at start-up, answered 404
        # Both untouched for a month: the TTL removes the pull request's preview (what shows it ran), never the base
        pull = make_pr_repo(tmp_path / "pull", "python", "feature/old", config=config_for("python"))
        stack.send("opened", 3, pull, pull.sha_a)
        stack.wait_for(3, "running", pull.sha_a)
        age(stack, days=30)
        stack.wait_gone(3)
        assert stack.records()[BASE_ID]["status"] == "running"
        assert base_page(stack).text == "python says: commit B\n"
    finally:
        stop_stack(stack)


def age(stack: Stack, days: int) -> None:
    """Every preview of the running service last deployed `days` ago (through the store, under its lock)."""
    then = datetime.now(UTC) - timedelta(days=days)

    def older(data: StoreFile) -> None:
        for ident, record in data.deployments.items():
            data.deployments[ident] = record.model_copy(update={"updatedAt": then})

    DeploymentStore(stack.root / "state" / "deployments.json").update(older)
