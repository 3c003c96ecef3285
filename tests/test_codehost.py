"""The GitHub code host's API against the fake: comments, retries, backoff and rate limits (ApiClient's, which
every code host plugin uses)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import CodeHostError
from tests.support.fake_codehost import FakeCodeHost


@pytest.fixture
def fake() -> Iterator[FakeCodeHost]:
    server = FakeCodeHost().start()
    yield server
    server.stop()


def client(fake: FakeCodeHost, waits: list[float]) -> GitHub:
    api = api_client(fake.url, "secret-token-1", retry_base=0.5, sleep=waits.append, metrics=Metrics())
    return GitHub(api, fake.url, "secret-token-1", "webhook-secret")


def test_creates_then_edits_one_comment_with_the_token(fake: FakeCodeHost) -> None:
    host = client(fake, [])
    comment_id = host.upsert_comment("acme", "api", 7, None, "building")
    assert host.upsert_comment("acme", "api", 7, comment_id, "ready") == comment_id
    assert fake.comments_on("acme", "api", 7) == [
        {"owner": "acme", "repo": "api", "pr": 7, "body": "ready", "edits": 1}]
    assert {call.headers["Authorization"] for call in fake.calls} == {"Bearer secret-token-1"}
    assert [(c.method, c.path) for c in fake.calls] == [
        ("POST", "/repos/acme/api/issues/7/comments"), ("PATCH", f"/repos/acme/api/issues/comments/{comment_id}")]


def test_the_services_comment_is_found_by_its_marker(fake: FakeCodeHost) -> None:
    host = client(fake, [])
    assert host.find_marked_comment("acme", "api", 7, "<!-- marker -->") is None
    host.upsert_comment("acme", "api", 7, None, "someone else's words")
    mine = host.upsert_comment("acme", "api", 7, None, "<!-- marker -->\nNo preview")
    host.upsert_comment("acme", "api", 8, None, "<!-- marker -->\nanother pull request")
    assert host.find_marked_comment("acme", "api", 7, "<!-- marker -->") == mine
    assert fake.calls[-1].path == "/repos/acme/api/issues/7/comments?per_page=100"


def test_a_deleted_comment_is_replaced(fake: FakeCodeHost) -> None:
    assert client(fake, []).upsert_comment("acme", "api", 7, 424242, "ready") != 424242
    assert len(fake.comments_on("acme", "api", 7)) == 1


def test_server_errors_are_retried_three_times_with_exponential_backoff(fake: FakeCodeHost) -> None:
    waits: list[float] = []
    fake.fail_next(3, 502)
    client(fake, waits).upsert_comment("acme", "api", 7, None, "x")
    assert waits == [0.5, 1.0, 2.0]
    assert [c.status for c in fake.calls] == [502, 502, 502, 201]


def test_gives_up_after_three_retries(fake: FakeCodeHost) -> None:
    fake.fail_next(4, 500)
    with pytest.raises(CodeHostError):
        client(fake, []).upsert_comment("acme", "api", 7, None, "x")
    assert len(fake.calls) == 4


def test_429_honours_retry_after(fake: FakeCodeHost) -> None:
    waits: list[float] = []
    fake.fail_next(1, 429, {"Retry-After": "7"})
    client(fake, waits).upsert_comment("acme", "api", 7, None, "x")
    assert waits == [7.0]


def test_rate_limited_403_waits_for_the_reset(fake: FakeCodeHost) -> None:
    waits: list[float] = []
    reset = int(time.time()) + 30
    fake.fail_next(1, 403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)})
    client(fake, waits).upsert_comment("acme", "api", 7, None, "x")
    assert len(waits) == 1 and 25 <= waits[0] <= 31


def test_a_plain_403_is_not_retried(fake: FakeCodeHost) -> None:
    fake.fail_next(1, 403)
    with pytest.raises(CodeHostError, match="403"):
        client(fake, []).upsert_comment("acme", "api", 7, None, "x")
    assert len(fake.calls) == 1


def test_an_unreachable_host_is_an_error_not_a_crash() -> None:
    waits: list[float] = []
    host = GitHub(api_client("http://127.0.0.1:9", "", retry_base=0.01, sleep=waits.append, metrics=Metrics()), "http://127.0.0.1:9",
                  "", "webhook-secret")
    with pytest.raises(CodeHostError):
        host.upsert_comment("acme", "api", 7, None, "x")
    assert len(waits) == 3
