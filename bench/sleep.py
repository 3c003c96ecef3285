"""(6) Waking a sleeping preview: how long the first request to a preview that slept takes to get the app's answer.

The service runs with PREVIEW_IDLE_SECONDS=2 (the test knob of PREVIEW_IDLE_MINUTES) and looks every 0.25 s; each
round waits until the preview is `sleeping` with its containers stopped, then sends one GET through nginx, as a
client that is not a browser (it waits for the wake; a browser would get the "waking up" page after 1.5 s) and
times it until the app's answer. The service's own figure (the wake flow: containers started to the health path
answering, from the deployment log) is reported beside it.

Two samples, both with the database container every preview has (PostgreSQL; the stand-in image of the test
host, Debian's PostgreSQL 15): the small app, `tests/sample_apps/python` (its page does not touch the database),
and the PostgreSQL-backed one, `examples/hello`, whose page connects to the database on every request — the round
counts only when the page says the database is reachable.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, Budget, scratch
from bench.stats import median
from orchestrator.common.labels import DEPLOYMENT_LABEL
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

IDLE_SECONDS = 2.0
CHECK_SECONDS = 0.25
SAMPLES = {
    # name: (sample directory, the page's answer)
    "small": ("python", "python says: commit A\n"),
    "postgres": (str(REPO_ROOT / "examples" / "hello"), "Hello from a preview! Database: reachable.\n"),
}
_AWAKE = re.compile(r"awake after ([0-9.]+)s")


def _stopped(deployment: str) -> bool:
    states = subprocess.run(["docker", "ps", "-a", "--filter", f"label={DEPLOYMENT_LABEL}={deployment}",
                             "--format", "{{.State}}"], capture_output=True, text=True, timeout=60,
                            check=True).stdout.split()
    return bool(states) and set(states) == {"exited"}


def _status(stack: Stack, deployment: str) -> str | None:
    record = stack.records().get(deployment)
    return record["status"] if record else None


def _rounds(stack: Stack, pr: int, page: str, repeats: int) -> list[dict[str, float]]:
    deployment = f"{SLUG}-{pr}"
    url = f"{stack.nginx.url}/{SLUG}/pr-{pr}/"
    runs = []
    for _ in range(repeats):
        wait_until(lambda: _status(stack, deployment) == "sleeping" and _stopped(deployment), 120, "asleep", 0.1)
        began = time.perf_counter()
        answer = web.get(url, timeout=120)
        took = time.perf_counter() - began
        if answer.status_code != 200 or answer.text != page or answer.headers.get("x-preview-deployment") != \
                deployment:
            raise AssertionError(f"woken preview answered {answer.status_code} {answer.text[:200]!r}")
        flows = [float(seconds) for seconds in _AWAKE.findall(stack.logs(pr))]
        runs.append({"request_s": took, "wake_flow_s": flows[-1] if flows else float("nan")})
    return runs


def bench_sleep(budget: Budget) -> dict[str, Any]:
    results: dict[str, Any] = {"idle_seconds": IDLE_SECONDS, "repeats": budget.sleep_repeats, "samples": {}}
    with scratch("sleep") as root:
        stack = start_stack(root / "stack", own_key=budget.prune_engine_caches, PREVIEW_IDLE_SECONDS=str(IDLE_SECONDS),
                            SLEEP_CHECK_INTERVAL_SECONDS=str(CHECK_SECONDS), LOG_LEVEL="info")
        try:
            for pr, (name, (sample, page)) in enumerate(SAMPLES.items(), start=200):
                repo = make_pr_repo(root / "repos", sample, f"feature/sleep-{name}")
                stack.send("opened", pr, repo, repo.sha_a)
                stack.wait_for(pr, "running", repo.sha_a)
                runs = _rounds(stack, pr, page, budget.sleep_repeats)
                stack.send("closed", pr, repo, repo.sha_a)
                stack.wait_gone(pr)
                results["samples"][name] = {
                    "sample": Path(sample).name, "runs": runs,
                    "median_request_s": median([r["request_s"] for r in runs]),
                    "max_request_s": max(r["request_s"] for r in runs),
                    "median_wake_flow_s": median([r["wake_flow_s"] for r in runs]),
                }
        finally:
            stop_stack(stack)
    return results
