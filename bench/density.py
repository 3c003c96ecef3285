"""(7) Density: many previews of the Go sample on one host, the idle ones asleep, and what a request to a sleeping
one meets.

The service runs as a user would run it for this (defaults, but PREVIEW_IDLE_SECONDS — the test knob of
PREVIEW_IDLE_MINUTES — short enough for the run, and MAX_CONCURRENT_PREVIEWS raised). `opened` arrives for every
pull request at once; each preview has the Go app and its PostgreSQL container. Reported: how long until all
run, the host's memory in use (MemTotal − MemAvailable) before, at its peak and once the idle ones sleep, the
running containers then, and the first request through nginx to sleeping previews (`density_wakes` of them, one
after the other), timed until the app's answer (targets: within 2 s; issue 35: p95 under 1 s with 500 previews).
One PostgreSQL-backed preview (`examples/hello`, whose page queries the database) is among them and reported apart.
Everything is closed at the end and the memory read again.

The engine must hold a network per preview: Docker's default address pools hold about 30 (docs/scaling.md); the
test engine's hold 1,024 (scripts/test-engine).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, Budget, scratch
from bench.sleep import _stopped
from bench.stats import median, percentile
from orchestrator.common.labels import DEPLOYMENT_LABEL
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

GO_PAGE = "go says: commit A\n"
PG_PAGE = "Hello from a preview! Database: reachable.\n"
FIRST_PR = 300


def _used_mib() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kib = int(fields["MemTotal"].split()[0]) - int(fields["MemAvailable"].split()[0])
    return kib / 1024


def _statuses(stack: Stack) -> dict[int, str]:
    return {record["prNumber"]: record["status"] for record in stack.records().values()}


class _Peak(threading.Thread):
    """The highest memory in use, read every second."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = _used_mib()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            self.peak = max(self.peak, _used_mib())


def _running_containers(deployments: set[str]) -> int:
    """Running containers of these previews (other work on the engine is not counted)."""
    output = subprocess.run(["docker", "ps", "--filter", f"label={DEPLOYMENT_LABEL}", "--format",
                             f'{{{{.Label "{DEPLOYMENT_LABEL}"}}}}'], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    return sum(1 for line in output.splitlines() if line.strip() in deployments)


def _wake(stack: Stack, pr: int, page: str) -> float:
    wait_until(lambda: _statuses(stack).get(pr) == "sleeping" and _stopped(f"{SLUG}-{pr}"), 600, f"pr {pr} asleep", 0.5)
    began = time.perf_counter()
    answer = web.get(f"{stack.nginx.url}/{SLUG}/pr-{pr}/", timeout=120)
    took = time.perf_counter() - began
    if answer.status_code != 200 or answer.text != page:
        raise AssertionError(f"woken preview {pr} answered {answer.status_code} {answer.text[:200]!r}")
    return took


def bench_density(budget: Budget) -> dict[str, Any]:
    count = budget.density_previews
    results: dict[str, Any] = {"previews": count, "idle_seconds": budget.density_idle_seconds}
    with scratch("density") as root:
        go = make_pr_repo(root / "repos", "go", "feature/density")
        hello = make_pr_repo(root / "repos", str(REPO_ROOT / "examples" / "hello"), "feature/density-pg")
        results["memory_before_mib"] = _used_mib()
        stack = start_stack(root / "stack", own_key=budget.prune_engine_caches,
                            PREVIEW_IDLE_SECONDS=str(budget.density_idle_seconds),
                            SLEEP_CHECK_INTERVAL_SECONDS="2", MAX_CONCURRENT_PREVIEWS=str(count + 10),
                            LOG_LEVEL="info")
        peak = _Peak()
        peak.start()
        numbers = list(range(FIRST_PR, FIRST_PR + count))
        pg = numbers[-1]  # the last one: examples/hello, the PostgreSQL-backed page
        try:
            began = time.perf_counter()
            for pr in numbers:
                repo = hello if pr == pg else go
                stack.send("opened", pr, repo, repo.sha_a)
            def settled() -> bool:
                statuses = [_statuses(stack).get(pr) for pr in numbers]
                return "failed" in statuses or all(s in ("running", "sleeping") for s in statuses)

            wait_until(settled, 60 * count, "every preview running", 2.0)
            failed = [pr for pr, status in _statuses(stack).items() if status == "failed"]
            if failed:
                raise AssertionError(f"previews failed: {failed[:10]}\n{stack.logs(failed[0])[-3000:]}")
            results["all_running_s"] = time.perf_counter() - began
            # The idle ones asleep: every preview, once nobody has asked for it for the idle time.
            wait_until(lambda: all(status == "sleeping" for status in _statuses(stack).values()),
                  budget.density_idle_seconds * 4 + 120, "every preview asleep", 2.0)
            time.sleep(5)  # stopped containers' memory returned
            results["memory_asleep_mib"] = _used_mib()
            results["running_containers_asleep"] = _running_containers({f"{SLUG}-{pr}" for pr in numbers})
            wakes = [_wake(stack, pr, GO_PAGE) for pr in numbers[: min(budget.density_wakes, count - 1)]]
            results["wake_go_s"] = {"runs": wakes, "median": median(wakes), "p95": percentile(wakes, 0.95),
                                    "max": max(wakes)}
            results["wake_postgres_s"] = _wake(stack, pg, PG_PAGE)
            results["memory_peak_mib"] = peak.peak
            began = time.perf_counter()
            for pr in numbers:
                stack.send("closed", pr, hello if pr == pg else go, (hello if pr == pg else go).sha_a)
            wait_until(lambda: not stack.records(), 30 * count, "every preview removed", 2.0)
            results["all_removed_s"] = time.perf_counter() - began
            time.sleep(5)
            results["memory_after_mib"] = _used_mib()
        finally:
            peak.stopped.set()
            stop_stack(stack)
    return results
