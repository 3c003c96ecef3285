"""The real `preview-orchestrator serve` process under uvicorn, over a socket."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import web
from tests.support.handlers import RecordingHandler
from tests.support.live import ServiceProcess, wait_until
from tests.support.payloads import FIXTURE_DEPLOYMENT, pr_payload, webhook_headers

pytestmark = pytest.mark.live


def recording_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "EVENT_HANDLER": "tests.support.handlers:from_env",
        "TEST_JOURNAL": str(tmp_path / "journal.jsonl"),
        **extra,
    }


def journal(tmp_path: Path) -> RecordingHandler:
    """Read-only view of the journal the service's RecordingHandler writes."""
    return RecordingHandler(store=None, journal=tmp_path / "journal.jsonl")  # type: ignore[arg-type]


def send(service: ServiceProcess, body: bytes, delivery: str | None = None) -> httpx.Response:
    return web.post(f"{service.url}/webhook/codehost", content=body,
                    headers=webhook_headers(body, delivery=delivery), timeout=10)


def test_real_process_serves_the_contract(tmp_path: Path) -> None:
    with ServiceProcess(tmp_path, **recording_env(tmp_path)) as service:
        health = web.get(f"{service.url}/health").json()
        assert health["status"] == "ok"
        assert web.get(f"{service.url}/api-docs").status_code == 200
        assert send(service, pr_payload()).json() == {"status": "ok"}
        wait_until(lambda: len(journal(tmp_path).entries()) == 1, message="event processed")
        listed = web.get(f"{service.url}/api/previews").json()["deployments"]
        assert [d["deploymentId"] for d in listed] == [FIXTURE_DEPLOYMENT]
        bad = web.post(
            f"{service.url}/webhook/codehost", content=b"{}", headers={"X-Hub-Signature-256": "x"}
        )
        assert bad.status_code == 401 and bad.json() == {"error": "Invalid signature"}
    lines = [json.loads(line) for line in service.log_path.read_text().splitlines()]
    assert any(line.get("deploymentId") == FIXTURE_DEPLOYMENT for line in lines)
    assert "live-test-token-8d2e" not in service.log_path.read_text()


def test_log_level_filters_lines(tmp_path: Path) -> None:
    with ServiceProcess(tmp_path, LOG_LEVEL="warn", **recording_env(tmp_path)) as service:
        send(service, pr_payload())
        wait_until(lambda: len(journal(tmp_path).entries()) == 1, message="event processed")
    levels = {json.loads(line)["level"] for line in service.log_path.read_text().splitlines()}
    assert levels <= {"warn", "error"}


def test_acknowledged_events_survive_sigkill_and_run_exactly_once(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    env = recording_env(tmp_path, TEST_GATE=str(gate), MAX_CONCURRENT_BUILDS="1")
    service = ServiceProcess(tmp_path, **env).start()
    deliveries = [f"delivery-{n}" for n in range(1, 6)]
    for n, delivery in enumerate(deliveries, start=1):
        assert send(service, pr_payload(number=n), delivery=delivery).status_code == 200
    wait_until(lambda: len(journal(tmp_path).entries("start")) == 1, message="first flow started")
    service.kill9()
    assert journal(tmp_path).entries("done") == []

    gate.touch()
    restarted = ServiceProcess(tmp_path, port=service.port, **env)
    with restarted:
        wait_until(lambda: len(journal(tmp_path).entries()) == 5, message="all events processed")
        # A redelivery after the restart is acknowledged and not processed again.
        assert send(restarted, pr_payload(number=1), delivery="delivery-1").status_code == 200
        listed = web.get(f"{restarted.url}/api/previews").json()["deployments"]
    done = [entry["delivery"] for entry in journal(tmp_path).entries()]
    assert sorted(done) == deliveries
    assert len(listed) == 5


@pytest.mark.skipif(shutil.which("schemathesis", path=str(Path(sys.executable).parent)) is None,
                    reason="schemathesis is part of the test extras")
def test_schemathesis_finds_no_server_error_or_schema_violation(tmp_path: Path) -> None:
    with ServiceProcess(tmp_path, **recording_env(tmp_path)) as service:
        result = subprocess.run(
            [str(Path(sys.executable).parent / "schemathesis"), "run", f"{service.url}/openapi.json",
             "--checks", "all", "--exclude-checks", "positive_data_acceptance",
             "--max-examples", "40", "--seed", "20261122", "--workers", "1",
             "--generation-database", "none", "--no-color", "--request-timeout", "10"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
        assert web.get(f"{service.url}/health").status_code == 200
