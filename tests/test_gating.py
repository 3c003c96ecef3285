"""Which pull requests get a preview: drafts and the opt-in label, driven by GitHub's own example payloads of
`labeled`, `unlabeled`, `ready_for_review` and `converted_to_draft`; ignored actions are acknowledged with 200
and a log line saying why."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from falcon import testing

from orchestrator.events.gating import Gate
from orchestrator.events.webhook import Ignored
from orchestrator.http.app import create_app
from orchestrator.state.records import PullRequestEvent
from tests.conftest import SettingsFactory
from tests.support.codehosts import parse_github
from tests.support.handlers import RecordingHandler
from tests.support.payloads import FIXTURE_REPO, fixture, webhook_headers

ALLOWED = frozenset({FIXTURE_REPO.lower()})


def payload(name: str, draft: bool | None = None, labels: list[str] | None = None,
            label: str | None = None) -> dict[str, Any]:
    data = fixture(f"pull_request.{name}")
    if draft is not None:
        data["pull_request"]["draft"] = draft
    if labels is not None:
        data["pull_request"]["labels"] = [{"name": name} for name in labels]
    if label is not None:
        data["label"] = {"name": label}
    return data


def decide(data: dict[str, Any], gate: Gate) -> PullRequestEvent | Ignored:
    return parse_github(json.dumps(data).encode(), "pull_request", "d-1", ALLOWED, gate)


def acted_as(result: PullRequestEvent | Ignored) -> str | None:
    return None if isinstance(result, Ignored) else result.action


DEFAULT = Gate()
LABELLED = Gate(label="Preview")


@pytest.mark.parametrize(("data", "gate", "expected"), [
    # Drafts: skipped by default, deployed when allowed; ready_for_review deploys; converted_to_draft removes.
    (payload("opened", draft=True), DEFAULT, None),
    (payload("synchronize", draft=True), DEFAULT, None),
    (payload("reopened", draft=True), DEFAULT, None),
    (payload("opened", draft=True), Gate(drafts=True), "opened"),
    (payload("opened", draft=False), DEFAULT, "opened"),
    (payload("ready_for_review"), DEFAULT, "opened"),
    (payload("converted_to_draft"), DEFAULT, "closed"),
    (payload("converted_to_draft"), Gate(keep_converted=True), None),
    (payload("converted_to_draft"), Gate(drafts=True), None),
    (payload("closed", draft=True), DEFAULT, "closed"),
    # The label: only labelled pull requests; labeled deploys, unlabeled removes; other labels do nothing.
    (payload("opened", labels=["bug"]), LABELLED, None),
    (payload("synchronize", labels=[]), LABELLED, None),
    (payload("synchronize", labels=["preview"]), LABELLED, "synchronize"),
    (payload("labeled", label="preview"), LABELLED, "opened"),
    (payload("labeled", label="bug"), LABELLED, None),
    (payload("labeled", label="preview", draft=True), LABELLED, None),
    (payload("unlabeled", label="PREVIEW"), LABELLED, "closed"),
    (payload("unlabeled", label="bug"), LABELLED, None),
    (payload("ready_for_review", labels=["bug"]), LABELLED, None),
    (payload("closed", labels=[]), LABELLED, "closed"),
    # Without a label setting, labels change nothing.
    (payload("labeled", label="preview"), DEFAULT, None),
    (payload("unlabeled", label="preview"), DEFAULT, None),
], ids=lambda value: "" if not isinstance(value, dict) else f"{value['action']}")
def test_what_each_action_is_acted_on_as(data: dict[str, Any], gate: Gate, expected: str | None) -> None:
    assert acted_as(decide(data, gate)) == expected


def test_a_gated_out_delivery_of_a_repository_not_allowed_is_still_refused() -> None:
    from orchestrator.events.webhook import WebhookRejected

    data = payload("opened", draft=True)
    with pytest.raises(WebhookRejected) as refused:
        parse_github(json.dumps(data).encode(), "pull_request", "d", frozenset({"other/repo"}), DEFAULT)
    assert refused.value.status == 403


@pytest.fixture
def gated_client(make_settings: SettingsFactory, handler: RecordingHandler) -> testing.TestClient:
    settings = make_settings(preview_label="preview", webhook_processing="sync")
    return testing.TestClient(create_app(settings, handler))


def post(client: testing.TestClient, data: dict[str, Any]) -> testing.Result:
    body = json.dumps(data).encode()
    return client.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body))


def test_over_http_ignored_actions_get_200_and_a_reason_and_acted_ones_reach_the_flows(
        gated_client: testing.TestClient, handler: RecordingHandler, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        ignored = post(gated_client, payload("opened", labels=["bug"]))
    assert ignored.status_code == 200 and ignored.json == {"status": "ok"}
    assert "label 'preview' is not on the pull request" in caplog.text
    assert handler.entries("start") == []
    labelled = post(gated_client, payload("labeled", label="preview"))
    assert labelled.status_code in (200, 202)
    assert [entry["action"] for entry in handler.entries("start")] == ["opened"]
    removed = post(gated_client, payload("unlabeled", label="preview"))
    assert removed.status_code in (200, 202)
    assert [entry["action"] for entry in handler.entries("start")] == ["opened", "closed"]


def test_a_drafts_opened_creates_nothing_by_default(client: testing.TestClient, handler: RecordingHandler) -> None:
    result = post(client, payload("opened", draft=True))
    assert result.status_code == 200
    assert handler.entries("start") == []
