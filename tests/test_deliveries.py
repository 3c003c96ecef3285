"""The delivery log (issue: nothing missed): every webhook received is kept with what came of it, readable at
`GET /api/deliveries`, by `preview-orchestrator deliveries` and on the dashboard, bounded, and an accepted one can be
replayed."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from falcon import testing

from orchestrator.events import delivery_log
from orchestrator.events.delivery_log import DeliveryLog, Entry
from orchestrator.http.app import create_app
from orchestrator.settings import Settings
from orchestrator.state.records import PullRequestEvent
from tests.support import web
from tests.support.handlers import RecordingHandler
from tests.support.live import ServiceProcess, wait_until
from tests.support.payloads import pr_payload, webhook_headers
from tests.test_operator_api import run_cli


def post(client: testing.TestClient, body: bytes, **headers: Any) -> Any:
    return client.simulate_post("/webhook/codehost", body=body, headers={**webhook_headers(body), **headers})


def deliveries(client: testing.TestClient, **params: str) -> list[dict[str, Any]]:
    answer = client.simulate_get("/api/deliveries", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json["deliveries"]


def test_every_delivery_is_kept_with_what_came_of_it(make_settings: Any, handler: RecordingHandler) -> None:
    settings = make_settings(preview_label="preview")
    client = testing.TestClient(create_app(settings, handler))
    labelled = json.loads(pr_payload("opened", number=5))
    labelled["pull_request"]["labels"] = [{"name": "preview"}]
    body = json.dumps(labelled).encode()
    assert post(client, body, **{"X-GitHub-Delivery": "d-accepted"}).status_code == 200
    assert post(client, body, **{"X-GitHub-Delivery": "d-accepted"}).status_code == 200  # redelivered
    assert post(client, pr_payload("opened", number=6), **{"X-GitHub-Delivery": "d-gated"}).status_code == 200
    assert post(client, b'{"zen": "hi", "hook_id": 1}', **{"X-GitHub-Event": "ping",
                                                          "X-GitHub-Delivery": "d-ping"}).status_code == 200
    foreign = pr_payload("opened", number=7, repository="evil/repo")
    assert post(client, foreign, **{"X-GitHub-Delivery": "d-foreign"}).status_code == 403
    fork = json.loads(pr_payload("opened", number=9))
    fork["pull_request"]["labels"] = [{"name": "preview"}]
    fork["pull_request"]["head"]["repo"].update(full_name="mallory/Hello-World", fork=True)
    assert post(client, json.dumps(fork).encode(), **{"X-GitHub-Delivery": "d-fork"}).status_code == 200
    unsigned = pr_payload("opened", number=8, repository="secret/name")
    assert client.simulate_post("/webhook/codehost", body=unsigned, headers={
        **webhook_headers(unsigned), "X-Hub-Signature-256": "sha256=" + "0" * 64,
        "X-GitHub-Delivery": "d-unsigned"}).status_code == 401

    logged = {entry["deliveryId"]: entry for entry in deliveries(client)}
    assert [entry["deliveryId"] for entry in deliveries(client)] == [
        "d-unsigned", "d-fork", "d-foreign", "d-ping", "d-gated", "d-accepted", "d-accepted"]  # the newest first
    accepted = deliveries(client)[-1]
    assert (accepted["outcome"], accepted["status"], accepted["repository"], accepted["prNumber"],
            accepted["action"], accepted["event"], accepted["codehost"], accepted["replayable"]) == \
        ("accepted", 200, "Codertocat/Hello-World", 5, "opened", "pull_request", "github", True)
    assert deliveries(client)[-2]["outcome"] == "duplicate" and not deliveries(client)[-2]["replayable"]
    gated = logged["d-gated"]
    assert (gated["outcome"], gated["prNumber"]) == ("ignored", 6)
    assert "label 'preview' is not on the pull request" in gated["reason"]
    assert (logged["d-ping"]["outcome"], logged["d-ping"]["reason"]) == ("ignored", "ping")
    refused = logged["d-foreign"]
    assert (refused["outcome"], refused["status"], refused["repository"], refused["reason"]) == \
        ("refused", 403, "evil/repo", "Repository not in allowed list")
    forked = logged["d-fork"]  # kept (its comment says how to approve it), and the log says why nothing deploys
    assert (forked["outcome"], forked["prNumber"], forked["replayable"]) == ("accepted", 9, True)
    assert forked["reason"].startswith("from a fork: no preview until a writer comments /preview approve")
    assert logged["d-accepted"]["reason"] in (None, "")
    # an unsigned body is never read: what it claims is not in the log
    unsigned_entry = logged["d-unsigned"]
    assert (unsigned_entry["outcome"], unsigned_entry["status"], unsigned_entry["repository"],
            unsigned_entry["reason"]) == ("refused", 401, None, "Invalid signature")
    assert not any(entry["replayable"] for entry in deliveries(client) if entry["outcome"] != "accepted")

    # filters
    assert [entry["deliveryId"] for entry in deliveries(client, repository="codertocat/hello-world", pr="6")] == \
        ["d-gated"]
    assert len(deliveries(client, limit="2")) == 2
    assert deliveries(client, codehost="gitea") == []
    for params in ({"pr": "x"}, {"pr": "0"}, {"limit": "5000"}, {"repository": "no-slash"}):
        assert client.simulate_get("/api/deliveries", params=params).status_code == 400, params


def test_an_accepted_delivery_is_replayed_as_a_new_event(settings: Settings, handler: RecordingHandler) -> None:
    client = testing.TestClient(create_app(settings, handler))  # each request runs the app's lifespan: flows run
    assert post(client, pr_payload("synchronize", number=9, sha="b" * 40),
                **{"X-GitHub-Delivery": "d-sync"}).status_code == 200
    assert post(client, b'{"zen": "hi", "hook_id": 1}', **{"X-GitHub-Event": "ping"}).status_code == 200
    sync_id, ping_id = deliveries(client)[1]["id"], deliveries(client)[0]["id"]
    wait_until(lambda: len(handler.entries()) == 1, timeout=10)

    answer = client.simulate_post(f"/api/deliveries/{sync_id}/replay", json={})
    assert answer.status_code == 202, answer.text
    assert answer.json["action"] == "synchronize" and answer.json["deploymentId"] == "codertocat-hello-world-9"
    wait_until(lambda: len(handler.entries()) == 2, timeout=10)  # processed again
    replayed = handler.entries()[1]
    assert (replayed["action"], replayed["sha"], replayed["delivery"]) == ("synchronize", "b" * 40,
                                                                            answer.json["deliveryId"])
    assert replayed["delivery"].startswith(f"replay-{sync_id}-")
    with sqlite3.connect(settings.inbox_path) as db:
        kept = db.execute("SELECT event_json FROM events WHERE delivery_id = ?", (replayed["delivery"],)).fetchone()
    event = PullRequestEvent.model_validate_json(kept[0])
    assert event.trigger == "replay" and event.pr_updated_at is None  # the operator's: never stale
    entry = deliveries(client)[0]
    assert (entry["id"], entry["outcome"], entry["status"], entry["reason"]) == (
        answer.json["logId"], "accepted", 202, f"replay of delivery {sync_id}")
    # a second replay is another event again (each replay is the operator's own, never a duplicate)
    assert client.simulate_post(f"/api/deliveries/{sync_id}/replay", json={}).status_code == 202
    wait_until(lambda: len(handler.entries()) == 3, timeout=10)

    refused = client.simulate_post(f"/api/deliveries/{ping_id}/replay", json={})
    assert refused.status_code == 409 and "it was ignored" in refused.json["error"]
    assert client.simulate_post("/api/deliveries/999/replay", json={}).status_code == 404
    assert client.simulate_post("/api/deliveries/1x/replay", json={}).status_code == 400
    # without a JSON body (what a web page could send the operator's service unasked): nothing replayed
    blind = client.simulate_post(f"/api/deliveries/{sync_id}/replay", body="x",
                                 headers={"Content-Type": "text/plain"})
    assert blind.status_code == 415
    assert len(handler.entries()) == 3


def test_a_replay_of_a_repository_no_longer_allowed_is_refused(make_settings: Any, handler: RecordingHandler,
                                                                 tmp_path: Path) -> None:
    settings = make_settings()
    client = testing.TestClient(create_app(settings, handler))
    assert post(client, pr_payload("opened", number=3)).status_code == 200
    entry = deliveries(client)[0]["id"]
    narrowed = testing.TestClient(create_app(make_settings(allowed_repos="acme/other"), handler))
    answer = narrowed.simulate_post(f"/api/deliveries/{entry}/replay", json={})
    assert answer.status_code == 403 and answer.json["error"] == "Repository not in allowed list"


def test_the_log_is_bounded_by_days_and_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = DeliveryLog(tmp_path / "deliveries.sqlite3", keep_days=14)
    now = datetime.now(UTC)
    old = log.record(Entry(codehost="github", outcome="accepted", status=200, delivery_id="old",
                           kept_event=None), now=now - timedelta(days=15))
    log.record(Entry(codehost="github", outcome="ignored", status=200, delivery_id="new"), now=now)
    assert [entry.deliveryId for entry in log.list()] == ["new"]  # past DELIVERY_LOG_DAYS: not shown
    assert log.kept_event(old) is None  # nor replayed
    assert log.prune() == 1
    monkeypatch.setattr(delivery_log, "MAX_ROWS", 8)
    monkeypatch.setattr(delivery_log, "MAX_UNVERIFIED", 3)
    log.record(Entry(codehost="github", outcome="accepted", status=200, delivery_id="real"))
    for number in range(6):  # unsigned requests, which anyone can send: the newest few kept, the real one too
        log.record(Entry(codehost="github", outcome="refused", status=401, delivery_id=f"flood-{number}"))
    log.prune()
    assert [entry.deliveryId for entry in log.list()] == ["flood-5", "flood-4", "flood-3", "real", "new"]
    for number in range(10):
        log.record(Entry(codehost="github", outcome="ignored", status=200, delivery_id=f"many-{number}"))
    log.prune()
    assert len(log.list(limit=100)) == 8  # MAX_ROWS, whatever they are
    # what the sender controls is kept bounded and plain
    log.record(Entry(codehost="github", outcome="refused", status=401, delivery_id="x" * 500,
                     event="pull_request\n<script>", reason="event \x1b[31mred\x9b2J is not handled"))
    newest = log.list(limit=1)[0]
    assert newest.deliveryId == "x" * 100 and newest.event == "pull_request??script?"
    assert newest.reason == "event ?[31mred?2J is not handled"  # no terminal escape reaches the CLI


def test_the_dashboard_shows_the_newest_deliveries_escaped(make_settings: Any, handler: RecordingHandler) -> None:
    settings = make_settings(preview_label="preview")
    client = testing.TestClient(create_app(settings, handler))
    labelled = json.loads(pr_payload("labeled", number=4))
    labelled["label"] = {"name": "<b>sneaky</b>"}
    assert post(client, json.dumps(labelled).encode()).status_code == 200
    page = client.simulate_get("/dashboard").text
    assert "Recent deliveries" in page and "&lt;b&gt;sneaky&lt;/b&gt;" in page and "<b>sneaky" not in page
    assert "#4" in page and "ignored" in page


@pytest.mark.live
def test_the_cli_lists_and_replays_deliveries(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    with ServiceProcess(tmp_path, EVENT_HANDLER="tests.support.handlers:from_env",
                        TEST_JOURNAL=str(journal)) as service:
        assert run_cli("deliveries", url=service.url).stdout == "No deliveries.\n"
        body = pr_payload("opened", number=12)
        assert web.post(f"{service.url}/webhook/codehost", content=body,
                        headers=webhook_headers(body, delivery="d-cli")).status_code == 200
        handled = RecordingHandler(store=None, journal=journal)  # type: ignore[arg-type] - reads the journal only
        wait_until(lambda: len(handled.entries()) == 1, timeout=10)
        table = run_cli("deliveries", "--repository", "Codertocat/Hello-World", "--pr", "12", url=service.url)
        header, row = table.stdout.splitlines()
        assert header.split() == ["N", "RECEIVED", "HOST", "REPOSITORY", "PR", "EVENT", "OUTCOME", "WHY"]
        assert row.split()[0] == "1" and row.split()[3:] == ["github", "Codertocat/Hello-World", "#12",
                                                             "pull_request", "·", "opened", "accepted"]
        replayed = run_cli("replay", "1", url=service.url)
        assert replayed.returncode == 0, replayed.stderr
        assert replayed.stdout == "Delivery 1 replayed: opened of codertocat-hello-world-12 queued (log entry 2)\n"
        wait_until(lambda: len(handled.entries()) == 2, timeout=10)  # processed again
        assert handled.entries()[1]["delivery"].startswith("replay-1-")
        missing = run_cli("replay", "99", url=service.url)
        assert missing.returncode == 1 and "Delivery 99 is not in the log" in missing.stderr
        as_json = json.loads(run_cli("deliveries", "--json", url=service.url).stdout)
        assert [entry["outcome"] for entry in as_json["deliveries"]] == ["accepted", "accepted"]
