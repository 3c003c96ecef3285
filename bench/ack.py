"""(1) Webhook acknowledgement in `queue` mode, and (3b) the service's resident memory idle and under load.

The service is the real `preview-orchestrator serve` under uvicorn; its event handler is the tests'
recording handler (a journal line per event, no store write, no Docker), because this measures the path
from the request to the 200 — signature, validation, the durable inbox write — and the dispatcher, not the
deploys the events would start (bench/scale measures the store write). Every
request is a distinct pull request with a distinct delivery id, so "no event lost" is checked exactly:
each acknowledged delivery must be processed once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Budget, CpuSteal, rss_kib, run_loadgen, scratch
from bench.loadgen import build_request
from bench.stats import summary_ms
from tests.support.live import ServiceProcess, wait_until
from tests.support.payloads import pr_payload, webhook_headers


def _requests(first_pr: int, count: int, host: str) -> list[str]:
    encoded = []
    for number in range(first_pr, first_pr + count):
        body = pr_payload("opened", number=number, sha=f"{number:040x}")
        encoded.append(build_request("/webhook/codehost", host, webhook_headers(body), body).raw.hex())
    return encoded


class MemorySampler:
    """Samples VmRSS every 50 ms on a thread while a load runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid)["VmRSS"])
            self._stop.wait(0.05)


def bench_ack(budget: Budget) -> dict[str, Any]:
    with scratch("ack") as root:
        journal = root / "journal.jsonl"
        service = ServiceProcess(root, EVENT_HANDLER="tests.support.handlers:from_env",
                                 TEST_JOURNAL=str(journal), TEST_KEEP_STORE="false",
                                 WEBHOOK_PROCESSING="queue", LOG_LEVEL="warn", MAX_CONCURRENT_BUILDS="4",
                                 MAX_CONCURRENT_PREVIEWS="100000")
        with service:
            assert service.process is not None
            pid = service.process.pid
            time.sleep(1.0)
            idle = rss_kib(pid)["VmRSS"]
            host = f"127.0.0.1:{service.port}"
            levels: list[dict[str, Any]] = []
            next_pr = 1
            plans = [("open-loop", rate, budget.ack_connections, max(1, int(rate * budget.ack_seconds)))
                     for rate in budget.ack_rates]
            plans += [("saturation", 0, conns, budget.saturation_requests)
                      for conns in budget.saturation_connections]
            sent_total = 0
            with MemorySampler(pid) as memory:
                for mode, rate, connections, count in plans:
                    spec = {"host": "127.0.0.1", "port": service.port, "rate": rate, "connections": connections,
                            "requests": _requests(next_pr, count, host)}
                    next_pr += count
                    sent_total += count
                    with CpuSteal() as steal:
                        result = run_loadgen(spec, root)
                    accepted = result["statuses"].get("200", 0)
                    levels.append({"mode": mode, "offered_rps": rate or None, "connections": connections,
                                   "sent": count, "accepted": accepted, "errors": result["errors"],
                                   "accepted_per_s": accepted / result["elapsed"], **summary_ms(result["latencies"]),
                                   "cpu_steal_pct": steal.percent})
                drain_began = time.monotonic()
                wait_until(lambda: _processed(journal) >= sent_total, timeout=1200, message="all events processed")
                drained_after = time.monotonic() - drain_began
            processed = _processed_deliveries(journal)
            loaded = memory.peak_kib
    accepted_total = sum(level["accepted"] for level in levels)
    return {"levels": levels, "accepted": accepted_total, "processed_once": len(set(processed)),
            "processed_twice": len(processed) - len(set(processed)), "lost": accepted_total - len(set(processed)),
            "rss_idle_mib": idle / 1024, "rss_loaded_peak_mib": loaded / 1024,
            "drained_after_s": drained_after}


def _processed_deliveries(journal: Path) -> list[str]:
    if not journal.exists():
        return []
    return [json.loads(line)["delivery"] for line in journal.read_text().splitlines()
            if line and json.loads(line)["phase"] == "done"]


def _processed(journal: Path) -> int:
    return len(_processed_deliveries(journal))
