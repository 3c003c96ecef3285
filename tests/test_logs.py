from __future__ import annotations

import io
import json
import logging

import pytest

from orchestrator.observability.logs import configure_logging


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_one_json_object_per_line_filtered_by_level(restore_root) -> None:
    stream = io.StringIO()
    configure_logging("warn", [], stream)
    log = logging.getLogger("orchestrator.test")
    log.info("hidden")
    log.warning("shown", extra={"deploymentId": "acme-api-3"})
    log.error("also shown\nwith a newline")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "warn" and first["message"] == "shown" and first["deploymentId"] == "acme-api-3"
    assert second["level"] == "error" and "deploymentId" not in second
    assert {"time", "level", "logger", "message"} <= set(first)


def test_secrets_are_masked_everywhere(restore_root) -> None:
    stream = io.StringIO()
    configure_logging("debug", ["tok\"en-123456", "webhook-secret-xyz"], stream)
    log = logging.getLogger("orchestrator.test")
    log.debug("token is %s", 'tok"en-123456')
    try:
        raise ValueError("secret webhook-secret-xyz leaked")
    except ValueError:
        log.exception("failed")
    text = stream.getvalue()
    assert "123456" not in text and "webhook-secret-xyz" not in text
    assert text.count("***") >= 2
    for line in text.splitlines():
        json.loads(line)
