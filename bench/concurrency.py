"""(4) Many pull requests at once: N `opened` webhooks sent together, with MAX_CONCURRENT_BUILDS 1, 2 and 4.

Figures: time from the first webhook to the first preview answering through nginx, and to the last. The
layers of the sample app are cached (warm), so the figure is the orchestration and the containers' start,
not the compiler.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.common import Budget, scratch
from bench.preview import PAGE_A, POLL_SECONDS, SAMPLE, RawSide, _forget_app_images
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.stack import SLUG, start_stack, stop_stack


def bench_concurrency(budget: Budget) -> dict[str, Any]:
    results = []
    with scratch("concurrency") as root:
        repo = make_pr_repo(root, SAMPLE, "feature/bench")
        RawSide(root, repo).prime()
        try:
            for builds in budget.concurrency_builds:
                stack = start_stack(root / f"stack-{builds}", own_key=budget.prune_engine_caches,
                                    MAX_CONCURRENT_BUILDS=str(builds),
                                    MAX_CONCURRENT_PREVIEWS=str(max(20, budget.concurrency_prs)),
                                    HEALTH_CHECK_INTERVAL_SECONDS=str(POLL_SECONDS), LOG_LEVEL="info")
                numbers = list(range(1, budget.concurrency_prs + 1))
                try:
                    began = time.perf_counter()
                    with ThreadPoolExecutor(len(numbers)) as pool:
                        list(pool.map(lambda n, s=stack: s.send("opened", n, repo, repo.sha_a), numbers))
                    ready: dict[int, float] = {}
                    with web.Client(timeout=5) as client:
                        deadline = time.monotonic() + 1800
                        while len(ready) < len(numbers) and time.monotonic() < deadline:
                            for n in numbers:
                                if n not in ready and _answers(client, f"{stack.nginx.url}/{SLUG}/pr-{n}/"):
                                    ready[n] = time.perf_counter() - began
                            time.sleep(POLL_SECONDS)
                    if len(ready) < len(numbers):
                        raise TimeoutError(f"only {len(ready)} of {len(numbers)} previews answered")
                    results.append({"max_concurrent_builds": builds, "prs": len(numbers),
                                    "first_s": min(ready.values()), "all_s": max(ready.values())})
                    with ThreadPoolExecutor(len(numbers)) as pool:
                        list(pool.map(lambda n, s=stack: s.send("closed", n, repo, repo.sha_a), numbers))
                    for n in numbers:
                        stack.wait_gone(n)
                finally:
                    stop_stack(stack)
        finally:
            _forget_app_images(prune_engine_caches=False)
    return {"runs": results}


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        response = client.get(url)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.text == PAGE_A
