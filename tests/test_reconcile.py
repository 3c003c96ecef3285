"""The reconcile against the code host (issue: nothing missed): listings of open pull requests from each built-in
code host, paged and conditional, the rate limit kept; and what a listing says the webhooks missed, through the
real inbox and store (the flows are the end-to-end tests': tests/test_reconcile_e2e.py)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.codehosts.gitea import Gitea
from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.codehosts.gitlab import GitLab
from orchestrator.events.codehost_reconcile import CodeHostReconcile
from orchestrator.events.inbox import Inbox
from orchestrator.flows import comments
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.api_client import MAX_PAGES, ApiClient, CodeHostError, RateLimit
from orchestrator.rendering.plugin_host import CodeHosts
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, PullRequestEvent
from orchestrator.state.store import DeploymentStore
from tests.support.fake_codehost import FakeCodeHost

SHA_A, SHA_B, SHA_C = "a" * 40, "b" * 40, "c" * 40
CLONE = "https://github.com/acme/api.git"


@pytest.fixture
def fake() -> Any:
    host = FakeCodeHost().start()
    yield host
    host.stop()


def github(fake: FakeCodeHost, metrics: Metrics | None = None) -> GitHub:
    return GitHub(api_client(fake.url, "t0ken", retry_base=0.01, metrics=metrics or Metrics()), fake.url, "t0ken",
                  "s" * 20)


# Listings -------------------------------------------------------------------------------------------------------


def test_github_lists_every_page_of_open_pull_requests_and_asks_again_conditionally(fake: FakeCodeHost) -> None:
    for number in range(1, 251):
        fake.open_pull("acme", "api", number, f"feature-{number}", SHA_A, CLONE, draft=number == 7,
                       labels=("Preview",) if number == 8 else ())
    host = github(fake)
    listed = host.open_pull_requests("acme", "api")
    assert sorted(change.number for change in listed) == list(range(1, 251))
    assert len(fake.listing_calls()) == 3  # 100 a page, following Link: rel="next"
    seven = next(change for change in listed if change.number == 7)
    eight = next(change for change in listed if change.number == 8)
    assert (seven.action, seven.owner, seven.name, seven.head_ref, seven.head_sha, seven.clone_url, seven.draft) == \
        ("opened", "acme", "api", "feature-7", SHA_A, CLONE, True)
    assert eight.labels == frozenset({"preview"}) and not eight.draft and seven.updated_at is not None
    spent = fake.rate_remaining
    assert host.rate_limit() == RateLimit(spent, 5000, None)
    # nothing changed: three 304s, none of them spending the rate limit, and the same listing
    again = host.open_pull_requests("acme", "api")
    assert [call.status for call in fake.listing_calls()[3:]] == [304, 304, 304]
    assert fake.rate_remaining == spent and again == listed
    assert all(call.headers.get("If-None-Match") for call in fake.listing_calls()[3:])
    fake.push_pull("acme", "api", 250, SHA_B)  # the newest: on the first page
    moved = {change.number: change.head_sha for change in host.open_pull_requests("acme", "api")}
    assert moved[250] == SHA_B and moved[1] == SHA_A
    assert [call.status for call in fake.listing_calls()[6:]] == [200, 304, 304]


def test_a_listing_is_complete_or_an_error(fake: FakeCodeHost) -> None:
    for number in range(1, 151):
        fake.open_pull("acme", "api", number, "feature", SHA_A, CLONE)
    host = github(fake)
    fake.fail_next(4, 502)  # the first page fails, retried, and fails again: no listing at all
    with pytest.raises(CodeHostError, match="502"):
        host.open_pull_requests("acme", "api")
    # one pull request the service cannot read (a branch name git refuses): still open, acted on by nothing
    fake.pulls[("acme", "api")][3]["head"]["ref"] = "x" * 300
    listed = {change.number: change for change in host.open_pull_requests("acme", "api")}
    assert len(listed) == 150 and listed[3].head_sha is None and listed[4].head_sha == SHA_A
    del fake.pulls[("acme", "api")][5]["number"]  # not even a number: nothing can be trusted
    with pytest.raises(CodeHostError, match="without a number"):
        host.open_pull_requests("acme", "api")


def test_paging_asks_only_the_apis_own_host_and_ends() -> None:
    asked: list[httpx.URL] = []

    def proxied(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        if request.url.params.get("page") == "2":
            return httpx.Response(200, json=[{"n": 2}])
        # a host behind a proxy names its public address in Link (or a hostile one another host)
        return httpx.Response(200, json=[{"n": 1}], headers={"Link": '<https://evil.test/repos/a/b/pulls?page=2>; '
                                                                     'rel="next"'})

    api = ApiClient("https://api.example.test", {"Authorization": "Bearer secret"},
                    transport=httpx.MockTransport(proxied), metrics=Metrics())
    assert api.paged("pulls", "/repos/a/b/pulls", {"per_page": 1}) == [{"n": 1}, {"n": 2}]
    assert [(url.host, url.path, url.params.get("page")) for url in asked] == [
        ("api.example.test", "/repos/a/b/pulls", None), ("api.example.test", "/repos/a/b/pulls", "2")]

    calls = []

    def endless(request: httpx.Request) -> httpx.Response:
        calls.append(request.url)
        page = int(request.url.params.get("page", "1"))
        return httpx.Response(200, json=[page], headers={
            "Link": f'<https://api.example.test/repos/a/b/pulls?page={page + 1}>; rel="next"'})

    api = ApiClient("https://api.example.test", {}, transport=httpx.MockTransport(endless), metrics=Metrics())
    with pytest.raises(CodeHostError, match=f"more than {MAX_PAGES} pages"):
        api.paged("pulls", "/repos/a/b/pulls", {})
    assert len(calls) == MAX_PAGES


def test_rate_limit_low_is_a_share_of_the_limit() -> None:
    assert RateLimit(249, 5000).low and not RateLimit(250, 5000).low  # 5 %
    assert RateLimit(49, 600).low and not RateLimit(50, 600).low  # at least 50
    assert RateLimit(29, 60).low and not RateLimit(30, 60).low  # at most half


def test_gitea_lists_open_pull_requests_with_its_wip_titles_as_drafts(fake: FakeCodeHost) -> None:
    fake.prefix = "/api/v1"
    fake.open_pull("team", "web", 4, "feature", SHA_A, "https://git.example.test/team/web.git")
    fake.open_pull("team", "web", 5, "wip", SHA_B, "https://git.example.test/team/web.git")
    fake.pulls[("team", "web")][5]["title"] = "WIP: not yet"
    for number in range(6, 60):
        fake.open_pull("team", "web", number, "more", SHA_C, "https://git.example.test/team/web.git")
    api = ApiClient(f"{fake.url}/api/v1", {}, retry_base=0.01, metrics=Metrics())
    listed = {change.number: change for change in Gitea(api, fake.url, "tok", "s" * 20).open_pull_requests("team",
                                                                                                       "web")}
    assert sorted(listed) == list(range(4, 60))  # two pages of 50
    assert [call.path.split("?")[1] for call in fake.listing_calls()] == ["state=open&limit=50",
                                                                          "state=open&limit=50&page=2"]
    assert not listed[4].draft and listed[5].draft and listed[4].head_repository == "team/web"


def test_gitlab_lists_open_merge_requests_with_their_source_projects() -> None:
    seen: list[str] = []

    def gitlab(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/api/v4/projects/group%2Fsub%2Fapp" or request.url.raw_path.startswith(
                b"/api/v4/projects/group%2Fsub%2Fapp"):
            if request.url.path.endswith("merge_requests"):
                raise AssertionError("listed by id")
        if request.url.raw_path == b"/api/v4/projects/group%2Fsub%2Fapp":
            return httpx.Response(200, json={"id": 11, "path_with_namespace": "group/sub/app",
                                             "http_url_to_repo": "https://gl.test/group/sub/app.git"})
        if request.url.path == "/api/v4/projects/11/merge_requests":
            assert request.url.params["state"] == "opened"
            return httpx.Response(200, json=[
                {"iid": 3, "sha": SHA_A, "source_branch": "fix", "target_branch": "main", "source_project_id": 11,
                 "draft": False, "labels": ["Preview"], "updated_at": "2026-11-26T10:00:00.000Z"},
                {"iid": 4, "sha": SHA_B, "source_branch": "fork-fix", "target_branch": "main",
                 "source_project_id": 12, "work_in_progress": True, "labels": [],
                 "updated_at": "2026-11-26T11:00:00.000Z"}], headers={"ratelimit-remaining": "1999",
                                                                       "ratelimit-limit": "2000"})
        if request.url.path == "/api/v4/projects/12":
            return httpx.Response(200, json={"id": 12, "path_with_namespace": "someone/app",
                                             "http_url_to_repo": "https://gl.test/someone/app.git"})
        return httpx.Response(404, json={"message": "404 Not found"})

    api = ApiClient("https://gl.test/api/v4", {}, transport=httpx.MockTransport(gitlab), metrics=Metrics())
    host = GitLab(api, "https://gl.test", "tok", "s" * 20)
    listed = {change.number: change for change in host.open_pull_requests("group/sub", "app")}
    assert (listed[3].owner, listed[3].name, listed[3].clone_url, listed[3].head_repository, listed[3].labels) == \
        ("group/sub", "app", "https://gl.test/group/sub/app.git", "group/sub/app", frozenset({"preview"}))
    assert (listed[4].clone_url, listed[4].head_repository, listed[4].draft) == \
        ("https://gl.test/someone/app.git", "someone/app", True)
    assert listed[4].updated_at == datetime(2026, 11, 26, 11, tzinfo=UTC)
    assert host.rate_limit() == RateLimit(1999, 2000, None)
    assert seen.count("/api/v4/projects/12") == 1


# What a listing says the webhooks missed -------------------------------------------------------------------------


@pytest.fixture
def parts(make_settings: Any, tmp_path: Path, fake: FakeCodeHost) -> Any:
    settings: Settings = make_settings(allowed_repos="acme/api", codehost_api_url=fake.url,
                                       reconcile_interval_minutes=1)
    store = DeploymentStore(settings.deployments_db)
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    metrics = Metrics()

    class Nudged:
        notified = 0

        def notify(self) -> None:
            self.notified += 1

    dispatcher = Nudged()
    reconcile = CodeHostReconcile(CodeHosts([github(fake, metrics)]), settings, store, inbox,
                                  dispatcher, metrics)  # type: ignore[arg-type]
    yield reconcile, store, inbox, metrics, dispatcher
    inbox.close()


def record(store: DeploymentStore, number: int, sha: str, status: str = "running",
           age: timedelta = timedelta(minutes=5)) -> None:
    when = datetime.now(UTC) - age
    made = DeploymentRecord(
        prNumber=number, repoName="api", repoOwner="acme", projectSlug="acme-api", deploymentId=f"acme-api-{number}",
        branch="feature", commitSha=sha, framework="go", dbType="postgres", appPort=8080, exposedAppPort=20000 + number,
        exposedDbPort=30000 + number, status=status, createdAt=when, updatedAt=when, url="http://x/")
    store.update(lambda data: data.deployments.update({made.deploymentId: made}))


def queued(inbox: Inbox) -> list[PullRequestEvent]:
    rows = inbox._db.execute("SELECT event_json FROM events WHERE status = 'pending' ORDER BY seq").fetchall()
    return [PullRequestEvent.model_validate_json(row[0]) for row in rows]


def run(reconcile: CodeHostReconcile) -> int:
    return asyncio.run(reconcile.check())


def test_what_the_webhooks_missed_is_queued_once_through_the_inbox(parts: Any, fake: FakeCodeHost) -> None:
    reconcile, store, inbox, metrics, dispatcher = parts
    fake.open_pull("acme", "api", 1, "new", SHA_A, CLONE)  # opened while the service was down
    fake.open_pull("acme", "api", 2, "pushed", SHA_B, CLONE)  # pushed to: the preview is at A
    record(store, 2, SHA_A)
    fake.open_pull("acme", "api", 3, "same", SHA_A, CLONE)  # up to date
    record(store, 3, SHA_A)
    fake.open_pull("acme", "api", 4, "gone", SHA_A, CLONE)
    fake.close_pull("acme", "api", 4)  # closed while the service was down
    record(store, 4, SHA_A)
    record(store, 5, SHA_A, age=timedelta(seconds=1))  # just deployed: the listing may predate it
    fake.open_pull("acme", "api", 6, "draft", SHA_A, CLONE, draft=True)  # gated: drafts get no preview
    record(store, 7, SHA_A, status="building")  # a flow holds it
    assert run(reconcile) == 3
    events = {event.pr_number: event for event in queued(inbox)}
    assert {number: event.action for number, event in events.items()} == {1: "opened", 2: "synchronize",
                                                                          4: "closed"}
    assert all(event.trigger == "reconcile" for event in events.values())
    assert (events[1].branch, events[1].commit_sha, events[1].clone_url, events[1].deployment_id) == \
        ("new", SHA_A, CLONE, "acme-api-1")
    assert events[2].commit_sha == SHA_B and events[1].pr_updated_at is not None
    assert dispatcher.notified == 1
    exposition = metrics.exposition().decode()
    for action in ("opened", "synchronize", "closed"):
        assert f'preview_orchestrator_reconcile_corrections_total{{action="{action}",codehost="github"}} 1.0' in \
            exposition
    assert 'preview_orchestrator_reconciles_total{codehost="github",result="done"} 1.0' in exposition
    assert 'preview_orchestrator_codehost_rate_limit_remaining{codehost="github"}' in exposition
    # the next look: everything is queued already, nothing twice
    assert run(reconcile) == 0 and len(queued(inbox)) == 3


def test_a_head_the_service_heard_of_is_not_started_again(parts: Any, fake: FakeCodeHost) -> None:
    reconcile, store, inbox, *_ = parts
    fake.open_pull("acme", "api", 1, "feature", SHA_A, CLONE)
    listed = github(fake).open_pull_requests("acme", "api")[0]
    # the webhook's push of that head was accepted and its deploy failed, or the TTL removed its preview since
    heard = PullRequestEvent(delivery_id="d-1", action="synchronize", deployment_id="acme-api-1",
                             project_slug="acme-api", repo_owner="acme", repo_name="api", pr_number=1,
                             branch="feature", commit_sha=SHA_A, received_at=datetime.now(UTC),
                             pr_updated_at=listed.updated_at)
    assert inbox.accept(heard).stored
    inbox.finish(inbox.claim_next([]).seq, "failed")  # type: ignore[union-attr]
    assert run(reconcile) == 0
    fake.push_pull("acme", "api", 1, SHA_B)  # the pull request moved on: now it is news
    assert run(reconcile) == 1 and queued(inbox)[0].commit_sha == SHA_B


def test_reopened_while_away_is_deployed_again(parts: Any, fake: FakeCodeHost) -> None:
    reconcile, store, inbox, *_ = parts
    closed = PullRequestEvent(delivery_id="d-2", action="closed", deployment_id="acme-api-1", project_slug="acme-api",
                              repo_owner="acme", repo_name="api", pr_number=1, branch="feature", commit_sha=SHA_A,
                              received_at=datetime.now(UTC), pr_updated_at=datetime.now(UTC) - timedelta(hours=1))
    assert inbox.accept(closed).stored
    inbox.finish(inbox.claim_next([]).seq, None)  # type: ignore[union-attr]
    fake.open_pull("acme", "api", 1, "feature", SHA_A, CLONE)
    assert run(reconcile) == 1 and queued(inbox)[0].action == "opened"


def test_work_queued_for_a_pull_request_gets_nothing_more(parts: Any, fake: FakeCodeHost) -> None:
    reconcile, store, inbox, *_ = parts
    fake.open_pull("acme", "api", 1, "feature", SHA_B, CLONE)
    record(store, 1, SHA_A)
    waiting = PullRequestEvent(delivery_id="webhook-1", action="synchronize", deployment_id="acme-api-1",
                               project_slug="acme-api", repo_owner="acme", repo_name="api", pr_number=1,
                               branch="feature", commit_sha=SHA_C, received_at=datetime.now(UTC))
    assert inbox.accept(waiting).stored
    assert run(reconcile) == 0
    assert [event.delivery_id for event in queued(inbox)] == ["webhook-1"]


def test_a_host_that_cannot_be_reached_or_is_short_of_requests_changes_nothing(parts: Any,
                                                                               fake: FakeCodeHost) -> None:
    reconcile, store, inbox, metrics, _ = parts
    record(store, 4, SHA_A)  # its pull request is not listed: closed, if the listing could be trusted
    fake.listing_down = True
    assert run(reconcile) == 0 and queued(inbox) == []
    assert 'reconciles_total{codehost="github",result="unreachable"} 1.0' in metrics.exposition().decode()
    fake.listing_down = False
    fake.rate_remaining = 100  # of 5000: below the 5 % kept for the flows' comments
    github_host = next(iter(reconcile._codehosts))
    github_host.api.rate_limit = RateLimit(100, 5000)
    before = len(fake.listing_calls())
    assert run(reconcile) == 0 and len(fake.listing_calls()) == before
    assert 'reconciles_total{codehost="github",result="rate_limited"} 1.0' in metrics.exposition().decode()


def test_a_listing_naming_another_repository_is_not_acted_on(parts: Any, fake: FakeCodeHost) -> None:
    """A renamed or transferred repository: GitLab answers the old path with the new project."""
    reconcile, store, inbox, *_ = parts
    record(store, 2, SHA_A)
    fake.open_pull("acme", "api", 1, "feature", SHA_A, CLONE)
    fake.pulls[("acme", "api")][1]["base"]["repo"]["full_name"] = "other/repo"
    assert run(reconcile) == 0 and queued(inbox) == []


def test_a_preview_missing_from_a_listing_is_removed_only_once_the_host_says_closed(parts: Any,
                                                                                      fake: FakeCodeHost) -> None:
    """Listings page by offset: a pull request closed between two pages' requests hides an open one."""
    reconcile, store, inbox, *_ = parts
    record(store, 1, SHA_A)
    fake.open_pull("acme", "api", 1, "feature", SHA_A, CLONE)
    listing = github(fake).open_pull_requests
    reconcile_host = next(iter(reconcile._codehosts))
    # the listing as a page boundary that moved would give it: without pull request 1, which is open
    reconcile_host.open_pull_requests = lambda owner, repo: [c for c in listing(owner, repo) if c.number != 1]
    assert run(reconcile) == 0  # asked alone, it is open: the preview stays
    fake.close_pull("acme", "api", 1)
    assert run(reconcile) == 1 and queued(inbox)[0].action == "closed"


def test_another_repositorys_preview_of_the_same_slug_is_left_alone(parts: Any, fake: FakeCodeHost) -> None:
    """`acme/api` and `acme-api/` … give the slug `acme-api`: the record of the other repository is theirs."""
    reconcile, store, inbox, *_ = parts
    other = DeploymentRecord(
        prNumber=1, repoName="api", repoOwner="acme", projectSlug="acme-api", deploymentId="acme-api-1",
        branch="feature", commitSha=SHA_A, framework="go", dbType="postgres", appPort=8080, exposedAppPort=20001,
        exposedDbPort=30001, status="running", createdAt=datetime.now(UTC), updatedAt=datetime.now(UTC),
        url="http://x/", codehost="gitea")
    store.update(lambda data: data.deployments.update({"acme-api-1": other}))
    fake.open_pull("acme", "api", 1, "feature", SHA_B, CLONE)
    assert run(reconcile) == 0 and queued(inbox) == []


def test_the_comment_says_the_reconcile_started_it() -> None:
    body = comments.with_trigger(comments.building(SHA_A, False), "reconcile")
    assert body.startswith(comments.MARKER) and "no webhook reported this change" in body
    assert comments.with_trigger("text", None) == "text"
    assert json.dumps(body)  # plain text
