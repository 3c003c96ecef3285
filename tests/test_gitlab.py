"""The `gitlab` code host without Docker: `Merge Request Hook` deliveries as GitLab sends them, through the real
HTTP app to the flows' handler; the token check; nested groups; its API (notes, commit statuses) against the fake.
End to end (real Docker, nginx, git) in test_gitlab_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from falcon import testing

from orchestrator.codehosts.gitlab import GitLab
from orchestrator.http.app import create_app
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import ApiClient
from tests.conftest import OwnEnv, SettingsFactory
from tests.support.fake_codehost import FakeCodeHost
from tests.support.handlers import RecordingHandler
from tests.support.payloads import GITLAB_PROJECT, GITLAB_SECRET, gitlab_headers, gitlab_payload

SHA = "d" * 40


@pytest.fixture
def gitlab_client(make_settings: SettingsFactory, own_env: OwnEnv, handler: RecordingHandler) -> testing.TestClient:
    own_env(GITLAB_WEBHOOK_SECRET=GITLAB_SECRET, GITLAB_URL="http://127.0.0.1:9")
    settings = make_settings(allowed_repos=f"gitlab:{GITLAB_PROJECT},gitlab:Group/Sub.Team/my_app",
                             webhook_processing="sync", preview_label="preview")
    return testing.TestClient(create_app(settings, handler))


def send(client: testing.TestClient, body: bytes, **headers: str) -> testing.Result:
    return client.simulate_post("/webhook/gitlab", body=body, headers=gitlab_headers(**headers))


def started(handler: RecordingHandler) -> list[tuple[str, str]]:
    return [(entry["action"], entry["deploymentId"]) for entry in handler.entries("start")]


def test_merge_request_actions_as_the_service_s_own(gitlab_client: testing.TestClient,
                                                   handler: RecordingHandler) -> None:
    labelled = ["preview"]
    assert send(gitlab_client, gitlab_payload("open", sha=SHA, labels=labelled)).status_code == 200
    # an update without new commits (a title, a description) changes nothing; with `oldrev` it redeploys
    assert send(gitlab_client, gitlab_payload("update", sha=SHA, labels=labelled,
                                              changes={"title": {"previous": "a", "current": "b"}})).status_code == 200
    assert send(gitlab_client, gitlab_payload("update", sha="e" * 40, oldrev=SHA, labels=labelled)).status_code == 200
    assert send(gitlab_client, gitlab_payload("merge", sha="e" * 40, labels=labelled)).status_code == 200
    assert send(gitlab_client, gitlab_payload("reopen", sha="e" * 40, labels=labelled)).status_code == 200
    assert send(gitlab_client, gitlab_payload("close", sha="e" * 40, labels=labelled)).status_code == 200
    assert started(handler) == [("opened", "gitlabhq-gitlab-test-1"), ("synchronize", "gitlabhq-gitlab-test-1"),
                                ("closed", "gitlabhq-gitlab-test-1"), ("reopened", "gitlabhq-gitlab-test-1"),
                                ("closed", "gitlabhq-gitlab-test-1")]
    first = handler.entries("start")[0]
    assert (first["codehost"], first["repository"], first["branch"], first["sha"]) == (
        "gitlab", "gitlab/gitlabhq/gitlab-test", "ms-viewport", SHA)


def test_nested_groups_a_fork_s_source_drafts_and_labels(gitlab_client: testing.TestClient,
                                                         handler: RecordingHandler) -> None:
    project = "Group/Sub.Team/my_app"
    fork = gitlab_payload("open", iid=3, sha=SHA, project=project, source="someone/my_app",
                          clone_url="https://gitlab.example.com/someone/my_app.git", labels=["preview"])
    assert send(gitlab_client, fork).status_code == 200
    entry = handler.entries("start")[0]
    assert (entry["deploymentId"], entry["repository"]) == ("group-sub-team-my-app-3", "gitlab/group/sub.team/my_app")
    assert entry["clone"] == "https://gitlab.example.com/someone/my_app.git"  # the source project's
    # a draft is not deployed; marking it ready is; labels decide with PREVIEW_LABEL
    assert send(gitlab_client, gitlab_payload("open", iid=4, sha=SHA, draft=True, labels=["preview"])
                ).status_code == 200
    ready = gitlab_payload("update", iid=4, sha=SHA, draft=False, labels=["preview"],
                           changes={"draft": {"previous": True, "current": False}})
    assert send(gitlab_client, ready).status_code == 200
    unlabelled = gitlab_payload("update", iid=4, sha=SHA, labels=[],
                                changes={"labels": {"previous": [{"title": "preview"}], "current": []}})
    assert send(gitlab_client, unlabelled).status_code == 200
    assert started(handler)[1:] == [("opened", "gitlabhq-gitlab-test-4"), ("closed", "gitlabhq-gitlab-test-4")]


@pytest.mark.parametrize("token", [None, "", "wrong", GITLAB_SECRET + "x", GITLAB_SECRET.upper()])
def test_a_wrong_or_missing_token_is_401_and_records_nothing(gitlab_client: testing.TestClient,
                                                             handler: RecordingHandler, token: str | None) -> None:
    headers = gitlab_headers()
    if token is None:
        headers.pop("X-Gitlab-Token")
    else:
        headers["X-Gitlab-Token"] = token
    result = gitlab_client.simulate_post("/webhook/gitlab", body=gitlab_payload("open", sha=SHA), headers=headers)
    assert result.status_code == 401 and result.json == {"error": "Invalid signature"}
    assert handler.entries("start") == []


def test_projects_not_allowed_other_events_and_bad_bodies(gitlab_client: testing.TestClient,
                                                          handler: RecordingHandler) -> None:
    other = send(gitlab_client, gitlab_payload("open", sha=SHA, project="gitlabhq/other"))
    assert other.status_code == 403 and other.json == {"error": "Repository not in allowed list"}
    # a push is read (base previews follow it): one of a project without a base preview changes nothing, one that
    # is not what GitLab sends is refused
    push = {"object_kind": "push", "ref": "refs/heads/main", "after": SHA, "checkout_sha": SHA,
            "project": {"path_with_namespace": "gitlabhq/gitlab-test", "git_http_url": "https://gl.test/x.git",
                        "default_branch": "main"}}
    assert send(gitlab_client, json.dumps(push).encode(), event="Push Hook").status_code == 200
    assert send(gitlab_client, b'{"object_kind": "push"}', event="Push Hook").status_code == 400
    assert send(gitlab_client, b'{"object_kind": "merge_request"}').status_code == 400
    too_deep = gitlab_payload("open", sha=SHA, project="/".join(["g"] * 22) + "/app")
    assert send(gitlab_client, too_deep).status_code in (400, 403)
    assert handler.entries("start") == []


def test_gitlab_is_off_until_its_secret_is_set(client: testing.TestClient) -> None:
    result = client.simulate_post("/webhook/gitlab", body=gitlab_payload("open", sha=SHA), headers=gitlab_headers())
    assert result.status_code == 404


@pytest.fixture
def fake_gitlab() -> Iterator[FakeCodeHost]:
    fake = FakeCodeHost(prefix="/api/v4").start()
    yield fake
    fake.stop()


def test_the_api_notes_once_edits_in_place_and_reports_commit_statuses(fake_gitlab: FakeCodeHost) -> None:
    host = GitLab(ApiClient(f"{fake_gitlab.url}/api/v4", {"PRIVATE-TOKEN": "glpat-1"}, retry_base=0.01,
                            sleep=lambda _: None, metrics=Metrics()), fake_gitlab.url, "glpat-1", GITLAB_SECRET)
    first = host.upsert_comment("group/sub", "app", 3, None, "building")
    assert host.upsert_comment("group/sub", "app", 3, first, "ready") == first
    assert host.find_marked_comment("group/sub", "app", 3, "ready") == first
    assert fake_gitlab.comments_on("group/sub", "app", 3)[0] == {
        "owner": "group/sub", "repo": "app", "pr": 3, "body": "ready", "edits": 1}
    assert [c.path.split("?")[0] for c in fake_gitlab.calls][:2] == [
        "/api/v4/projects/group%2Fsub%2Fapp/merge_requests/3/notes",
        f"/api/v4/projects/group%2Fsub%2Fapp/merge_requests/3/notes/{first}"]
    host.set_status("group/sub", "app", SHA, None, "in_progress", "Building the preview")
    host.set_status("group/sub", "app", SHA, None, "success", "Running", url="http://previews.test/x/")
    host.set_status("group/sub", "app", SHA, None, "inactive", "Preview removed")  # GitLab cannot go back
    assert [(s["state"], s.get("target_url"), s["name"]) for s in fake_gitlab.statuses_of("group/sub", "app", SHA)] == [
        ("running", None, "preview-orchestrator"), ("success", "http://previews.test/x/", "preview-orchestrator")]
    assert {call.headers["PRIVATE-TOKEN"] for call in fake_gitlab.calls} == {"glpat-1"}
    [line] = host.checks()
    assert line.ok and line.detail == "token of preview-bot"
    # git gets the token for the server's own clone URLs only
    assert host.clone_authorization(f"{fake_gitlab.url}/group/sub/app.git")
    assert host.clone_authorization("https://gitlab.com/group/sub/app.git") is None


def test_a_merged_or_closed_merge_request_is_never_deployed_again(gitlab_client: testing.TestClient,
                                                                  handler: RecordingHandler) -> None:
    data = json.loads(gitlab_payload("update", iid=6, sha=SHA, draft=False, labels=["preview"],
                                     changes={"draft": {"previous": True, "current": False}}))
    data["object_attributes"]["state"] = "merged"
    assert send(gitlab_client, json.dumps(data).encode()).status_code == 200
    assert handler.entries("start") == []


def test_only_developers_and_more_may_run_commands_on_gitlab(fake_gitlab: FakeCodeHost) -> None:
    """The gate of /preview commands: a member's access level (inherited too) of Developer (30) or more, asked by
    the note author's id; no id, or no member, is no."""
    fake_gitlab.members.update({7: 30, 8: 50, 9: 20})
    host = GitLab(ApiClient(f"{fake_gitlab.url}/api/v4", {"PRIVATE-TOKEN": "glpat-1"}, retry_base=0.01,
                            sleep=lambda _: None, metrics=Metrics()), fake_gitlab.url, "glpat-1", GITLAB_SECRET)
    assert host.can_write("group/sub", "app", "dev", 7) and host.can_write("group/sub", "app", "owner", 8)
    assert not host.can_write("group/sub", "app", "reporter", 9)
    assert not host.can_write("group/sub", "app", "stranger", 10)
    assert not host.can_write("group/sub", "app", "dev", None)  # a note without its author's id
    assert "/api/v4/projects/group%2Fsub%2Fapp/members/all/7" in [c.path for c in fake_gitlab.calls]
