"""The health wait: only 200 is healthy, probes every interval, and the last probe lands on the deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.adapters.health import wait_healthy
from orchestrator.common.commands import DeploymentLog
from orchestrator.common.flow_control import FlowAborted, FlowControl


@pytest.fixture
def app() -> Iterator[tuple[str, list[float], dict[str, int]]]:
    """A server whose status is set by the test; it notes when each probe arrived."""
    seen: list[float] = []
    answer = {"status": 204}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            seen.append(time.monotonic())
            self.send_response(answer["status"])
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health", seen, answer
    server.shutdown()


def test_only_200_is_healthy_and_the_last_probe_is_at_the_deadline(app, tmp_path: Path) -> None:  # noqa: ANN001
    url, seen, _ = app
    started = time.monotonic()
    assert not wait_healthy(url, 0.25, 1.0, DeploymentLog(tmp_path / "log"), FlowControl(60))
    assert len(seen) == 5  # at 0, 0.25, 0.5, 0.75 and 1.0 s: a 204 is not the app's health answer
    assert seen[-1] - started >= 0.98


def test_a_200_ends_the_wait(app, tmp_path: Path) -> None:  # noqa: ANN001
    url, seen, answer = app
    answer["status"] = 200
    assert wait_healthy(url, 5, 60, DeploymentLog(tmp_path / "log"), FlowControl(60))
    assert len(seen) == 1  # the first probe goes at once


def test_a_cancelled_flow_stops_waiting(app, tmp_path: Path) -> None:  # noqa: ANN001
    url, _, _ = app
    control = FlowControl(60)
    threading.Timer(0.3, control.cancel, args=("the pull request was closed",)).start()
    started = time.monotonic()
    with pytest.raises(FlowAborted):
        wait_healthy(url, 5, 60, DeploymentLog(tmp_path / "log"), control)
    assert time.monotonic() - started < 2


def test_a_stopped_app_ends_the_wait_at_once(app, tmp_path: Path) -> None:  # noqa: ANN001
    from orchestrator.adapters.health import AppStopped

    url, seen, _ = app
    started = time.monotonic()
    exited_at = started + 1.2
    watch = lambda: "app exited with code 1" if time.monotonic() >= exited_at else None  # noqa: E731
    with pytest.raises(AppStopped, match="app exited with code 1"):
        wait_healthy(url, 5, 60, DeploymentLog(tmp_path / "log"), FlowControl(60), watch=watch)
    assert time.monotonic() - started < 2.5  # looked at once a second, probes or not: within a second of the exit
    assert 1 <= len(seen) <= 10  # at most the probes at 0, 0.25, ... 2.25 s: then the watch ended the wait


def test_probes_start_close_together_and_grow_to_the_interval(app, tmp_path: Path) -> None:  # noqa: ANN001
    url, seen, _ = app
    looks: list[float] = []
    started = time.monotonic()
    assert not wait_healthy(url, 1.0, 3.0, DeploymentLog(tmp_path / "log"), FlowControl(60),
                            watch=lambda: looks.append(time.monotonic()))  # type: ignore[func-returns-value]
    # the containers looked at (a docker call) once a second at most, however close the probes
    assert 2 <= len(looks) <= 3 and all(b - a >= 0.98 for a, b in zip(looks, looks[1:], strict=False)), looks
    offsets = [at - started for at in seen]
    # 0.25 s apart for the first two seconds, then the gap doubles (0.5 s), then the 1-second interval, capped by
    # the deadline
    planned = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0]
    assert len(offsets) == len(planned)
    # never early; on time but for a busy 2-core machine's scheduling of the probe thread: most within 0.1 s, and a
    # stall of the whole machine (another suite's build) delays one probe, not the plan (probes are planned from
    # the start, so a late one does not push the next)
    late = sorted(got - want for got, want in zip(offsets, planned, strict=True))
    assert late[0] >= -0.02 and late[len(late) // 2] <= 0.1 and late[-1] <= 2.0, offsets


def test_the_first_probe_goes_before_any_look_at_the_containers(app, tmp_path: Path) -> None:  # noqa: ANN001
    url, seen, answer = app
    looks: list[float] = []

    def watch() -> None:
        looks.append(time.monotonic())

    answer["status"] = 200
    assert wait_healthy(url, 5, 60, DeploymentLog(tmp_path / "log"), FlowControl(60), watch=watch)
    assert len(seen) == 1 and looks == []  # answered at once: the look (a docker call) is not on the path
    answer["status"] = 503
    threading.Timer(0.6, answer.update, kwargs={"status": 200}).start()
    assert wait_healthy(url, 5, 60, DeploymentLog(tmp_path / "log"), FlowControl(60), watch=watch)
    assert looks and looks[0] < seen[-1]  # not up at once: watched between the probes as before


def test_a_wake_looks_at_its_containers_only_after_first_look(app, tmp_path: Path) -> None:  # noqa: ANN001
    """A wake started the containers itself a moment ago: its first look waits `first_look`, then once a second."""
    url, seen, _ = app
    looks: list[float] = []
    started = time.monotonic()
    assert not wait_healthy(url, 0.4, 2.6, DeploymentLog(tmp_path / "log"), FlowControl(60), first_gap=0.05,
                            first_look=1.0, watch=lambda: looks.append(time.monotonic()))  # type: ignore[func-returns-value]
    offsets = [at - started for at in looks]
    assert 2 <= len(offsets) <= 3 and offsets[0] >= 0.98, offsets
    assert all(b - a >= 0.98 for a, b in zip(offsets, offsets[1:], strict=False)), offsets
    assert len([at for at in seen if at - started < 0.98]) >= 8  # probed meanwhile, close together

def test_health_waits_and_code_host_clients_share_one_tls_context(app, tmp_path: Path,  # noqa: ANN001
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a TLS context loads the CA bundle (~20 ms of CPU): a deploy's health wait, a code host's client and
    a registry call take the process's one context instead of building their own (httpx's default)."""
    import ssl

    import httpx

    from orchestrator.common.tls import shared_context
    from orchestrator.observability.metrics import Metrics
    from orchestrator.plugin_api import ApiClient

    context = shared_context()
    assert context is shared_context() and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    built: list[object] = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(1) or real(*a, **k))
    url, _, answer = app
    answer["status"] = 200
    for _ in range(2):
        assert wait_healthy(url, 5, 60, DeploymentLog(tmp_path / "log"), FlowControl(60))
        ApiClient("https://codehost.invalid/api", {}, metrics=Metrics()).close()
    httpx.Client().close()  # what the counting sees: httpx's own default builds one
    assert len(built) == 1
