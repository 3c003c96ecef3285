"""`/preview …` commands (issue: the pull request as the control surface): what a comment asks, how each code
host's comment delivery is read, and how the webhook turns it into an event. What the commands do, through real
Docker, nginx and git: tests/test_commands_e2e.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from falcon import testing

from orchestrator.codehosts.gitea import Gitea
from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.codehosts.gitlab import GitLab
from orchestrator.events.commands import command_in
from orchestrator.http.app import create_app
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import ApiClient
from orchestrator.plugin_api.deliveries import Delivery, Ignored, PullRequestComment, WebhookRejected
from tests.support.fake_codehost import FakeCodeHost
from tests.support.handlers import RecordingHandler
from tests.support.payloads import comment_payload, webhook_headers


@pytest.mark.parametrize(("body", "expected"), [
    ("/preview redeploy", ("redeploy", None)),
    ("Looks good!\n\n  /Preview Reset-DB  \nthanks", ("reset-db", None)),
    ("/preview approve 1a2b3c4 please", ("approve", "1a2b3c4")),
    ("/preview", ("", None)),
    ("/preview frobnicate", ("frobnicate", None)),
    ("> /preview destroy\nI would not do that", None),  # a quote of someone's command
    ("/previewing is fun", None),
    ("we could `/preview destroy` it", None),
    ("", None),
])
def test_a_command_is_a_line_that_starts_with_preview(body: str, expected: tuple[str, str | None] | None) -> None:
    assert command_in(body) == expected


def test_only_the_first_hundred_lines_are_read() -> None:
    assert command_in("\n" * 100 + "/preview destroy") is None


def github_comment(body: bytes) -> Delivery:
    return Delivery({"x-github-event": "issue_comment"}, body)


def test_github_reads_a_new_comment_on_a_pull_request() -> None:
    host = GitHub(api_client("http://127.0.0.1:9", "", metrics=Metrics()), "http://127.0.0.1:9", "", "s" * 20)
    written = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
    read = host.parse(github_comment(comment_payload(7, "/preview redeploy", "octocat", comment_id=55,
                                                     created_at=written)))
    assert read == PullRequestComment(owner="Codertocat", name="Hello-World", number=7, author="octocat",
                                      body="/preview redeploy", comment_id=55, created_at=written)
    on_issue = host.parse(github_comment(comment_payload(7, "/preview redeploy", "octocat", on_pull_request=False)))
    assert on_issue == Ignored("a comment on an issue, not on a pull request")
    edited = json.loads(comment_payload(7, "/preview destroy", "octocat"))
    edited["action"] = "edited"  # an edit never runs a command again
    assert isinstance(host.parse(github_comment(json.dumps(edited).encode())), Ignored)
    bot = json.loads(comment_payload(7, "/preview destroy", "some-bot"))
    bot["comment"]["user"]["type"] = "Bot"
    assert host.parse(github_comment(json.dumps(bot).encode())) == Ignored("a comment written by a bot")
    hostile = json.loads(comment_payload(7, "/preview destroy", "octocat"))
    hostile["comment"]["user"]["login"] = "../../admin"  # it would go into the permission API's path
    with pytest.raises(WebhookRejected, match="login"):
        host.parse(github_comment(json.dumps(hostile).encode()))


def test_gitea_reads_a_comment_on_a_pull_request() -> None:
    host = Gitea(ApiClient("http://127.0.0.1:9/api/v1", {}, metrics=Metrics()), "http://127.0.0.1:9", "", "s" * 20)
    document = {"action": "created", "is_pull": True, "issue": {"number": 3},
                "comment": {"id": 8, "body": "/preview extend", "user": {"login": "ana"},
                            "created_at": "2026-11-26T10:00:00Z"},
                "repository": {"full_name": "team/web"}}
    delivery = Delivery({"x-gitea-event": "issue_comment"}, json.dumps(document).encode())
    assert host.parse(delivery) == PullRequestComment(owner="team", name="web", number=3, author="ana",
                                                      body="/preview extend", comment_id=8,
                                                      created_at=datetime(2026, 11, 26, 10, tzinfo=UTC))
    document["is_pull"] = False
    assert isinstance(host.parse(Delivery({"x-gitea-event": "issue_comment"}, json.dumps(document).encode())),
                      Ignored)


def test_gitlab_reads_a_note_on_a_merge_request() -> None:
    host = GitLab(ApiClient("http://127.0.0.1:9/api/v4", {}, metrics=Metrics()), "http://127.0.0.1:9", "", "s" * 20)
    document = {"object_kind": "note", "user": {"username": "dev", "id": 42},
                "project": {"path_with_namespace": "group/sub/app"},
                "object_attributes": {"id": 77, "note": "/preview reset-db", "noteable_type": "MergeRequest",
                                      "action": "create", "created_at": "2026-11-26 10:00:00 UTC"},
                "merge_request": {"iid": 9}}
    delivery = Delivery({"x-gitlab-event": "Note Hook"}, json.dumps(document).encode())
    assert host.parse(delivery) == PullRequestComment(owner="group/sub", name="app", number=9, author="dev",
                                                      body="/preview reset-db", author_id=42, comment_id=77,
                                                      created_at=datetime(2026, 11, 26, 10, tzinfo=UTC))
    document["object_attributes"]["noteable_type"] = "Commit"
    assert isinstance(host.parse(Delivery({"x-gitlab-event": "Note Hook"}, json.dumps(document).encode())), Ignored)


def test_write_permission_is_asked_of_the_code_host() -> None:
    fake = FakeCodeHost(permissions={"maintainer": "write", "owner": "admin", "reader": "read"}).start()
    try:
        host = GitHub(api_client(fake.url, "t0ken", retry_base=0.01, metrics=Metrics()), fake.url, "t0ken", "s" * 20)
        assert [host.can_write("acme", "api", user, None) for user in ("maintainer", "owner", "reader", "nobody")] \
            == [True, True, False, False]
        assert fake.calls[0].path == "/repos/acme/api/collaborators/maintainer/permission"
    finally:
        fake.stop()


def post_comment(client: testing.TestClient, body: bytes, **headers: str) -> Any:
    return client.simulate_post("/webhook/codehost", body=body,
                                headers={**webhook_headers(body, event="issue_comment"), **headers})


def test_a_command_comment_becomes_a_command_event(settings: Any, handler: RecordingHandler) -> None:
    client = testing.TestClient(create_app(settings, handler))
    assert post_comment(client, comment_payload(5, "Nice!\n/preview redeploy", "octocat")).status_code == 200
    assert post_comment(client, comment_payload(5, "Nice work", "octocat")).status_code == 200
    foreign = comment_payload(5, "/preview destroy", "octocat", repository="evil/repo")
    assert post_comment(client, foreign).status_code == 403
    logged = client.simulate_get("/api/deliveries").json["deliveries"]
    assert [(d["outcome"], d["action"], d["prNumber"]) for d in logged] == [
        ("refused", "comment", 5), ("ignored", "comment", 5), ("accepted", "command", 5)]
    assert logged[1]["reason"] == "pull request #5: a comment without a /preview command"
    handled = handler.entries()
    assert [(entry["action"], entry["deploymentId"]) for entry in handled] == [
        ("command", "codertocat-hello-world-5")]


def test_a_comment_runs_its_command_once_and_an_old_one_never(settings: Any, handler: RecordingHandler) -> None:
    """The delivery id header is not signed: a captured delivery sent again under another id is the same
    comment (its id), and one older than the inbox remembers is not run at all."""
    client = testing.TestClient(create_app(settings, handler))
    body = comment_payload(5, "/preview destroy", "maintainer", comment_id=4242)
    assert post_comment(client, body, **{"X-GitHub-Delivery": "first"}).status_code == 200
    assert post_comment(client, body, **{"X-GitHub-Delivery": "sent-again"}).status_code == 200
    old = comment_payload(5, "/preview destroy", "maintainer", created_at=datetime.now(UTC) - timedelta(days=8))
    assert post_comment(client, old).status_code == 200
    logged = client.simulate_get("/api/deliveries").json["deliveries"]
    assert [d["outcome"] for d in logged] == ["ignored", "duplicate", "accepted"]
    assert "too long ago to run its command" in logged[0]["reason"]
    assert len(handler.entries()) == 1


def test_the_operators_reset_db_is_a_json_post_of_a_known_preview(client: testing.TestClient) -> None:
    path = "/api/previews/codertocat-hello-world-5/reset-db"
    assert client.simulate_post(path, body="x", headers={"Content-Type": "text/plain"}).status_code == 415
    assert client.simulate_post(path, json={}).status_code == 404
    assert client.simulate_post("/api/previews/NOT_AN_ID/reset-db", json={}).status_code == 400
    assert client.simulate_get(path).status_code == 405 and client.simulate_delete(path).status_code == 405
