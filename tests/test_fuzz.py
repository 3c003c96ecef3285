"""Property-based fuzzing with a fixed seed and budget: hostile webhook bodies and preview-config.yml files
end in a clear rejection — never another exception, never a file written."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from orchestrator.events.webhook import Ignored, WebhookRejected
from orchestrator.plugin_api.preview_config import ConfigError, load_preview_config
from orchestrator.rendering.plugin_host import build_plugin_host
from tests.support.codehosts import parse_github
from tests.support.payloads import fixture

BUDGET = settings(max_examples=300, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ALLOWED = frozenset({"codertocat/hello-world"})
HOST = build_plugin_host(load_entry_points=False)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
FIELDS = ["action", "number", "pull_request", "repository", "sender"]
PR_FIELDS = ["number", "head", "base", "state"]
HEAD_FIELDS = ["ref", "sha", "repo"]


def outcome(body: bytes) -> str:
    try:
        result = parse_github(body, "pull_request", "delivery-1", ALLOWED)
    except WebhookRejected as rejected:
        assert rejected.status in (400, 403)
        assert rejected.message and "Traceback" not in rejected.message
        return str(rejected.status)
    return "ignored" if isinstance(result, Ignored) else "accepted"


@seed(20261122)
@BUDGET
@given(st.binary(max_size=2000))
def test_random_bytes_are_rejected_cleanly(body: bytes) -> None:
    """Random bytes are never a pull-request event (outcome() itself checks a refusal's status and message)."""
    assert outcome(body) in ("400", "403", "ignored")


@seed(20261122)
@BUDGET
@given(st.sampled_from(FIELDS), st.sampled_from(PR_FIELDS), st.sampled_from(HEAD_FIELDS), json_values,
       st.integers(min_value=0, max_value=2))
def test_mutated_real_payloads_are_accepted_or_rejected_cleanly(top: str, pr_field: str, head_field: str,
                                                                value: object, depth: int) -> None:
    payload = fixture("pull_request.opened")
    if depth == 0:
        payload[top] = value
    elif depth == 1:
        payload["pull_request"][pr_field] = value
    else:
        payload["pull_request"]["head"][head_field] = value
    result = outcome(json.dumps(payload).encode())
    if result == "accepted":
        event = parse_github(json.dumps(payload).encode(), "pull_request", "d", ALLOWED)
        assert not isinstance(event, Ignored)
        assert event.deployment_id == f"codertocat-hello-world-{event.pr_number}"
        assert event.branch is None or ("\n" not in event.branch and not event.branch.startswith("-"))


config_values = st.one_of(json_values, st.text(max_size=80), st.lists(st.text(max_size=30), max_size=5))
config_documents = st.dictionaries(
    st.sampled_from(["framework", "database", "health_check_path", "app_port", "app_port_env", "app_entrypoint",
                     "build_commands", "extra_services", "env", "env_file", "startup_commands", "dockerfile",
                     "unknown"]),
    config_values, max_size=13)


@seed(20261122)
@BUDGET
@given(st.one_of(config_documents.map(lambda d: yaml.safe_dump(d)), st.text(max_size=300)))
def test_preview_config_files_are_valid_or_rejected_cleanly(tmp_path: Path, text: str) -> None:
    repo = tmp_path / "fuzz"
    repo.mkdir(exist_ok=True)
    (repo / "preview-config.yml").write_text(text)
    try:
        config = load_preview_config(repo, HOST.known_names())
    except ConfigError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
    else:
        assert config.health_check_path.startswith("/")
        assert "\n" not in config.app_entrypoint
    assert sorted(p.name for p in repo.iterdir()) == ["preview-config.yml"]
