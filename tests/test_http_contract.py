"""The HTTP contract of the spec, over falcon.testing (the dispatcher runs inside each simulated request)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import falcon
import pytest
from falcon import testing
from openapi_spec_validator import validate

from orchestrator.events.inbox import Inbox
from orchestrator.http.app import create_app
from orchestrator.state.store import DeploymentStore
from tests.conftest import SettingsFactory
from tests.support.handlers import RecordingHandler
from tests.support.payloads import (
    FIXTURE_DEPLOYMENT,
    fixture_bytes,
    pr_payload,
    sign,
    webhook_headers,
)


def post_webhook(client: testing.TestClient, body: bytes, **kwargs: str) -> testing.Result:
    return client.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body, **kwargs))


# GET /health ----------------------------------------------------------------------------------


def test_health_reports_status_timestamp_and_uptime(client: testing.TestClient) -> None:
    result = client.simulate_get("/health")
    assert result.status_code == 200
    body = result.json
    assert set(body) == {"status", "timestamp", "uptime"}
    assert body["status"] == "ok"
    assert body["timestamp"].endswith("Z") and "T" in body["timestamp"]
    assert isinstance(body["uptime"], float) and body["uptime"] >= 0


# GET /openapi.json and /api-docs --------------------------------------------------------------


def test_openapi_document_is_valid_and_complete(client: testing.TestClient) -> None:
    doc = client.simulate_get("/openapi.json").json
    validate(doc)
    assert doc["openapi"] == "3.0.3"
    assert doc["info"]["version"] == "0.1.0"
    assert "security" not in doc and "securitySchemes" not in doc["components"]
    assert "servers" not in doc
    assert set(doc["paths"]) == {
        "/health", "/openapi.json", "/api-docs", "/webhook/codehost", "/api/previews", "/api/plugins",
        "/api/previews/{deploymentId}", "/api/previews/{deploymentId}/logs", "/metrics", "/dashboard",
        # PREVIEW_PROTECTION=token: nginx's auth_request and the link's first visit (docs/routing.md)
        "/api/preview-access/{deploymentId}", "/api/preview-access/{deploymentId}/token",
        # Sleep (PREVIEW_IDLE_MINUTES): a sleeping preview's route asks it to wake the app (docs/routing.md)
        "/api/preview-wake/{deploymentId}",
        # The delivery log (docs/codehosts.md)
        "/api/deliveries", "/api/deliveries/{id}/replay",
        # The operator's reset of a preview's database (README, "Commands in pull-request comments")
        "/api/previews/{deploymentId}/reset-db",
    }
    webhook = doc["paths"]["/webhook/codehost"]["post"]
    assert {"200", "400", "401", "403", "413", "500"} <= set(webhook["responses"])
    delete = doc["paths"]["/api/previews/{deploymentId}"]["delete"]
    assert set(delete["responses"]) == {"200", "400", "404", "500"}
    record = doc["components"]["schemas"]["DeploymentRecord"]
    assert set(record["properties"]) == {
        "prNumber", "repoName", "repoOwner", "projectSlug", "deploymentId", "branch", "commitSha",
        "framework", "dbType", "appPort", "exposedAppPort", "exposedDbPort", "status", "createdAt",
        "updatedAt", "url", "commentId",
        # ours, documented in docs/decisions.md
        "cloneUrl", "error", "codehostDeploymentId", "source", "sleptAt", "wokeAt", "secretsScope", "codehost",
        "headRepository", "routes", "links",
    }
    local = doc["paths"]["/api/previews"]["post"]
    assert set(local["responses"]) == {"202", "400", "403", "409"}
    assert record["properties"]["status"]["enum"] == ["building", "running", "failed", "sleeping"]
    assert record["properties"]["commentId"]["nullable"] is True
    payload = doc["components"]["schemas"]["GitHubWebhookPayload"]
    assert set(payload["required"]) == {"action", "pull_request", "repository"}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"orchestrator_public_url": "https://po.internal.test"}, "https://po.internal.test"),
        ({"preview_base_url": "https://previews.test"}, "https://previews.test"),
    ],
)
def test_openapi_servers_follow_settings(make_settings: SettingsFactory, handler: RecordingHandler,
                                         overrides: dict[str, str], expected: str) -> None:
    client = testing.TestClient(create_app(make_settings(**overrides), handler))
    doc = client.simulate_get("/openapi.json").json
    validate(doc)
    assert doc["servers"] == [{"url": expected}]


def test_api_docs_page_uses_only_local_assets(client: testing.TestClient) -> None:
    page = client.simulate_get("/api-docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assets = [part.split('"')[0] for part in page.text.split('="')[1:] if part.startswith("/")]
    assert len(assets) == 4
    assert "http" not in page.text.replace("<!DOCTYPE html>", "")
    for asset in assets:
        result = client.simulate_get(asset)
        assert result.status_code == 200, asset
        assert len(result.content) > 10
    init = client.simulate_get("/api-docs/static/api-docs-init.js").text
    assert '"/openapi.json"' in init


# Errors for unknown paths, wrong methods, unexpected failures ---------------------------------


def test_unknown_path_and_wrong_method_have_error_bodies(client: testing.TestClient) -> None:
    missing = client.simulate_get("/no/such/path")
    assert missing.status_code == 404 and missing.json == {"error": "Not found"}
    wrong = client.simulate_put("/health")
    assert wrong.status_code == 405 and wrong.json == {"error": "Method not allowed"}
    traversal = client.simulate_get("/api-docs/static/../../../../etc/passwd")
    assert traversal.status_code == 404 and "root:" not in traversal.text


def test_unexpected_exception_is_a_plain_500(client: testing.TestClient, store: DeploymentStore,
                                             monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    def explode() -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(DeploymentStore, "snapshot", lambda self: explode())
    result = client.simulate_get("/api/previews")
    assert result.status_code == 500
    assert result.json == {"error": "Internal server error"}
    assert "secret internals" in caplog.text


# POST /webhook/codehost -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "signature",
    [None, "", "sha256=", "sha1=abc", "sha256=" + "0" * 64, "sha256=zz", sign(b"other body")],
)
def test_bad_or_missing_signature_is_401(client: testing.TestClient, handler: RecordingHandler,
                                         signature: str | None) -> None:
    body = pr_payload()
    headers = webhook_headers(body)
    if signature is None:
        del headers["X-Hub-Signature-256"]
    else:
        headers["X-Hub-Signature-256"] = signature
    result = client.simulate_post("/webhook/codehost", body=body, headers=headers)
    assert result.status_code == 401
    assert result.json == {"error": "Invalid signature"}
    assert handler.entries("start") == []


def test_signature_is_checked_before_parsing(client: testing.TestClient) -> None:
    result = client.simulate_post("/webhook/codehost", body=b"{not json",
                                  headers={"Content-Type": "application/json"})
    assert result.status_code == 401


def test_ping_is_acknowledged(client: testing.TestClient, handler: RecordingHandler) -> None:
    result = post_webhook(client, fixture_bytes("ping"), event="ping")
    assert result.status_code == 200 and result.json == {"status": "ok"}
    assert handler.entries("start") == []


@pytest.mark.parametrize(("event", "body"), [
    ("issues", pr_payload()),
    ("pull_request", fixture_bytes("pull_request.labeled")),
    ("pull_request", json.dumps({"action": "edited", "anything": 1}).encode()),
])
def test_other_events_and_actions_are_acknowledged_and_ignored(
    make_settings: SettingsFactory, handler: RecordingHandler, event: str, body: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    settings = make_settings(webhook_processing="sync")
    client = testing.TestClient(create_app(settings, handler))
    result = post_webhook(client, body, event=event)
    assert result.status_code == 200 and result.json == {"status": "ok"}
    assert handler.entries("start") == []
    assert Inbox(settings.inbox_path).depth() == 0
    assert "ignored" in caplog.text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "Invalid payload: body is not JSON"),
        (b"\xff\xfe\x00garbage", "Invalid payload: body is not UTF-8"),
        (b"[1, 2]", "Invalid payload: body must be a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "Invalid payload: JSON is nested too deeply"),
        (json.dumps({"action": 5}).encode(), "Invalid payload: action is required and must be a string"),
        (json.dumps({"action": "opened"}).encode(), "Invalid payload: pull_request is required"),
        (pr_payload(number=0), "pull_request.number is not valid"),
        (pr_payload(number=10**30), "pull_request.number is not valid"),
        (pr_payload(sha="not-a-sha"), "pull_request.head.sha is not valid"),
        (pr_payload(ref="-rf"), "pull_request.head.ref is not valid"),
        (pr_payload(ref="a b"), "pull_request.head.ref is not valid"),
        (pr_payload(ref="x" * 300), "pull_request.head.ref is not valid"),
        (pr_payload(ref=None), "pull_request.head.ref required for opened"),
    ],
)
def test_signed_but_invalid_body_is_400_naming_the_problem(
    client: testing.TestClient, handler: RecordingHandler, body: bytes, message: str
) -> None:
    result = post_webhook(client, body)
    assert result.status_code == 400
    assert message in result.json["error"]
    assert handler.entries("start") == []


def test_wrong_content_type_is_415(client: testing.TestClient) -> None:
    body = pr_payload()
    headers = webhook_headers(body)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    result = client.simulate_post("/webhook/codehost", body=body, headers=headers)
    assert result.status_code == 415
    assert result.json == {"error": "Content-Type must be application/json"}


def test_repository_not_allowed_is_403_and_changes_nothing(
    make_settings: SettingsFactory, handler: RecordingHandler
) -> None:
    settings = make_settings(allowed_repos="acme/other", webhook_processing="sync")
    client = testing.TestClient(create_app(settings, handler))
    result = post_webhook(client, pr_payload())
    assert result.status_code == 403
    assert result.json == {"error": "Repository not in allowed list"}
    assert Inbox(settings.inbox_path).depth() == 0
    assert handler.entries("start") == []
    assert not settings.deployments_db.exists()


def test_allow_list_matches_case_insensitively(make_settings: SettingsFactory,
                                               handler: RecordingHandler) -> None:
    settings = make_settings(allowed_repos="CODERTOCAT/hello-world", webhook_processing="sync")
    client = testing.TestClient(create_app(settings, handler))
    assert post_webhook(client, pr_payload()).status_code == 200
    assert [e["deploymentId"] for e in handler.entries()] == [FIXTURE_DEPLOYMENT]


def test_body_over_25_mb_is_413(client: testing.TestClient) -> None:
    body = b'{"pad": "' + b"x" * (25 * 1024 * 1024) + b'"}'
    result = client.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body))
    assert result.status_code == 413
    assert "larger than 25 MB" in result.json["error"]


def test_a_signed_delivery_without_an_event_header_is_told_by_its_body(make_settings: SettingsFactory,
                                                                        handler: RecordingHandler) -> None:
    """The spec requires only the content type and the signature."""
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), handler))
    body = pr_payload()
    headers = {key: value for key, value in webhook_headers(body).items() if key != "X-GitHub-Event"}
    result = client.simulate_post("/webhook/codehost", body=body, headers=headers)
    assert result.status_code == 200
    assert [entry["action"] for entry in handler.entries()] == ["opened"]
    ping = fixture_bytes("ping")
    headers = {key: value for key, value in webhook_headers(ping).items() if key != "X-GitHub-Event"}
    assert client.simulate_post("/webhook/codehost", body=ping, headers=headers).status_code == 200
    assert len(handler.entries()) == 1  # the ping is acknowledged and nothing runs


def test_a_repository_with_the_same_slug_cannot_touch_the_deployment(make_settings: SettingsFactory,
                                                                       handler: RecordingHandler) -> None:
    """`Codertocat/Hello-World` and `Codertocat/Hello_World` give one deployment id: the first keeps it."""
    settings = make_settings(webhook_processing="sync", allowed_repos="Codertocat/Hello-World,Codertocat/Hello_World")
    client = testing.TestClient(create_app(settings, handler))
    assert post_webhook(client, pr_payload()).status_code == 200
    for action in ("opened", "synchronize", "closed"):
        result = post_webhook(client, pr_payload(action, repository="Codertocat/Hello_World"))
        assert result.status_code == 409
        assert result.json["error"] == (
            f"Deployment {FIXTURE_DEPLOYMENT} belongs to the repository Codertocat/Hello-World; another repository "
            "whose name gives the same deployment id cannot use it")
    assert [entry["action"] for entry in handler.entries()] == ["opened"]
    assert DeploymentStore(settings.deployments_db).read().deployments[FIXTURE_DEPLOYMENT].repoName == "Hello-World"


def test_same_delivery_twice_is_processed_once(make_settings: SettingsFactory,
                                               handler: RecordingHandler) -> None:
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), handler))
    body = pr_payload()
    first = post_webhook(client, body, delivery="delivery-1")
    again = post_webhook(client, body, delivery="delivery-1")
    assert first.status_code == again.status_code == 200
    assert again.json == {"status": "ok"}
    assert [e["delivery"] for e in handler.entries()] == ["delivery-1"]


def test_sync_mode_runs_the_flow_and_reports_failure_as_500(
    make_settings: SettingsFactory, store: DeploymentStore, tmp_path: Path
) -> None:
    failing = RecordingHandler(store=store, journal=tmp_path / "j.jsonl", fail_message="Docker build failed")
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), failing))
    result = post_webhook(client, pr_payload())
    assert result.status_code == 500
    assert result.json == {"error": "Docker build failed"}

    ok_handler = RecordingHandler(store=store, journal=tmp_path / "ok.jsonl")
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), ok_handler))
    result = post_webhook(client, pr_payload())
    assert result.status_code == 200
    assert store.read().deployments[FIXTURE_DEPLOYMENT].status == "running"


async def test_queue_mode_answers_before_the_flow_runs(settings, store: DeploymentStore,
                                                       tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    slow = RecordingHandler(store=store, journal=tmp_path / "j.jsonl", gate=gate)
    app = create_app(settings, slow)
    async with testing.ASGIConductor(app) as conductor:
        body = pr_payload()
        result = await conductor.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body))
        assert result.status_code == 200
        assert slow.entries("done") == []  # acknowledged while the flow has not finished
        gate.touch()
        await _until(lambda: len(slow.entries("done")) == 1)
    assert store.read().deployments[FIXTURE_DEPLOYMENT].commitSha == slow.entries()[0]["sha"]


async def _until(condition, timeout: float = 10.0) -> None:
    import asyncio

    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


# GET /api/previews ----------------------------------------------------------------------------


def test_list_is_empty_then_shows_records(make_settings: SettingsFactory, handler: RecordingHandler) -> None:
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), handler))
    assert client.simulate_get("/api/previews").json == {"deployments": []}
    post_webhook(client, pr_payload(number=7))
    deployments = client.simulate_get("/api/previews").json["deployments"]
    assert [d["deploymentId"] for d in deployments] == ["codertocat-hello-world-7"]
    assert deployments[0]["repoOwner"] == "Codertocat" and deployments[0]["prNumber"] == 7


def test_unreadable_store_is_500_and_left_untouched(client: testing.TestClient, settings) -> None:
    settings.deployments_db.write_text("{broken")
    result = client.simulate_get("/api/previews")
    assert result.status_code == 500
    assert str(settings.deployments_db) in result.json["error"]
    assert settings.deployments_db.read_text() == "{broken"


# DELETE /api/previews/{deploymentId} ----------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/api/previews/", "/api/previews/..", "/api/previews/%2e%2e", "/api/previews/a%2Fb-1",
     "/api/previews/a%20b-1", "/api/previews/codertocat-hello-world",
     "/api/previews/Codertocat-Hello-World-2",
     "/api/previews/x-01", "/api/previews/%3Brm%20-rf-1", "/api/previews/-1"],
)
def test_malformed_ids_are_400(client: testing.TestClient, path: str) -> None:
    result = client.simulate_delete(path)
    assert result.status_code == 400, path
    assert result.json == {"error": "Invalid deployment id"}


def test_delete_unknown_is_404(client: testing.TestClient) -> None:
    result = client.simulate_delete("/api/previews/acme-api-3")
    assert result.status_code == 404
    assert result.json == {"error": "Deployment not found"}


def test_delete_cleans_up_through_the_handler(make_settings: SettingsFactory, handler: RecordingHandler,
                                              store: DeploymentStore) -> None:
    client = testing.TestClient(create_app(make_settings(webhook_processing="sync"), handler))
    post_webhook(client, pr_payload())
    result = client.simulate_delete(f"/api/previews/{FIXTURE_DEPLOYMENT}")
    assert result.status_code == 200
    assert result.json == {"status": "ok", "message": f"Preview {FIXTURE_DEPLOYMENT} cleaned up"}
    assert store.read().deployments == {}
    assert [e["action"] for e in handler.entries()] == ["opened", "closed"]
    assert client.simulate_delete(f"/api/previews/{FIXTURE_DEPLOYMENT}").status_code == 404


def test_delete_failure_is_500_with_message(make_settings: SettingsFactory, handler: RecordingHandler,
                                            store: DeploymentStore, tmp_path: Path) -> None:
    settings = make_settings(webhook_processing="sync")
    body = pr_payload()
    testing.TestClient(create_app(settings, handler)).simulate_post(
        "/webhook/codehost", body=body, headers=webhook_headers(body))
    failing = RecordingHandler(store=store, journal=tmp_path / "f.jsonl",
                               fail_message="Cleanup left containers behind")
    result = testing.TestClient(create_app(settings, failing)).simulate_delete(
        f"/api/previews/{FIXTURE_DEPLOYMENT}")
    assert result.status_code == 500
    assert result.json == {"error": "Cleanup left containers behind"}
    assert FIXTURE_DEPLOYMENT in store.read().deployments


def test_error_bodies_are_json_for_every_status(client: testing.TestClient) -> None:
    for result in (client.simulate_get("/x"), client.simulate_post("/health"),
                   client.simulate_delete("/api/previews/..")):
        assert result.headers["content-type"].startswith(falcon.MEDIA_JSON)
        assert set(result.json) == {"error"}


@pytest.mark.parametrize("full_name", ["Ünïcode/Hello-World", "Codertocat/Hello World", "../../etc/passwd",
                                       "codertocat/hello-world/extra", "x" * 300])
def test_hostile_repository_names_never_reach_the_inbox(make_settings: SettingsFactory, handler: RecordingHandler,
                                                        full_name: str) -> None:
    settings = make_settings(webhook_processing="sync")
    client = testing.TestClient(create_app(settings, handler))
    payload = json.loads(pr_payload())
    payload["repository"]["full_name"] = full_name
    result = post_webhook(client, json.dumps(payload).encode())
    assert result.status_code in (400, 403), result.text
    assert Inbox(settings.inbox_path).depth() == 0 and handler.entries("start") == []
