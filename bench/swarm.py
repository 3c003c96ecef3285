"""(5) Time to preview on a Docker Swarm against one host: the same service and the same pull request, once with
RUNTIME=compose on this machine's engine and once with RUNTIME=swarm on a three-node swarm made on this machine
(tests/support/swarm.py: each node a dockerd in its own network namespace, Debian's docker-registry).

For each side: signed `opened` webhook → the record says `running` → the page answers through nginx (commit A);
`synchronize` → commit B; `closed` → the record is gone (everything removed). One unmeasured preview first on
each side (the app's layers built once: the warm case, a repository with other open pull requests), then
`preview_repeats` measured ones, alternating which side goes first. Sample: the Python app with PostgreSQL.
Needs root (network namespaces); reports why it was skipped otherwise.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.common import Budget, scratch
from bench.preview import POLL_SECONDS, _poll
from bench.stats import median
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.support.swarm import SwarmCluster, namespaces_refused

SAMPLE = "python"
BASE_IMAGES = ("po-standin/python:test", "po-standin/postgres:test")


def _lifecycle(stack: Stack, repo: PullRequestRepo, number: int) -> dict[str, float]:
    page = f"{stack.nginx.url}/{SLUG}/pr-{number}/"
    began = time.perf_counter()
    stack.send("opened", number, repo, repo.sha_a)
    stack.wait_for(number, "running", repo.sha_a)
    _poll(page, f"{SAMPLE} says: commit A\n")
    deployed = time.perf_counter() - began
    began = time.perf_counter()
    stack.send("synchronize", number, repo, repo.sha_b)
    stack.wait_for(number, "running", repo.sha_b)
    _poll(page, f"{SAMPLE} says: commit B\n")
    updated = time.perf_counter() - began
    began = time.perf_counter()
    stack.send("closed", number, repo, repo.sha_b)
    stack.wait_gone(number)
    return {"deploy_s": deployed, "update_s": updated, "cleanup_s": time.perf_counter() - began}


def bench_swarm(budget: Budget) -> dict[str, Any]:
    if (reason := namespaces_refused()) is not None:
        return {"skipped": reason}
    runs: dict[str, list[dict[str, float]]] = {"one_host": [], "swarm": []}
    with scratch("swarm") as root:
        repo = make_pr_repo(root, SAMPLE, "feature/bench-swarm")
        cluster = SwarmCluster(root / "cluster").start()
        stacks: dict[str, Stack] = {}
        try:
            began = time.perf_counter()
            cluster.load_images(*BASE_IMAGES)
            loaded = time.perf_counter() - began
            settings = {"HEALTH_CHECK_INTERVAL_SECONDS": str(POLL_SECONDS), "LOG_LEVEL": "info"}
            stacks["one_host"] = start_stack(root / "one", own_key=budget.prune_engine_caches, **settings)
            engines = ",".join(f"{node.name}={node.host}" for node in cluster.workers)
            stacks["swarm"] = start_stack(root / "swarm", own_key=budget.prune_engine_caches, RUNTIME="swarm",
                                          DOCKER_HOST=cluster.manager.host,
                                          SWARM_REGISTRY=cluster.registry, SWARM_REGISTRY_SCHEME="http",
                                          SWARM_NODE_ENGINES=engines, **settings)
            number = 200
            for stack in stacks.values():  # the warm-up preview, not measured
                number += 1
                _lifecycle(stack, repo, number)
            for repeat in range(budget.preview_repeats):
                order = list(stacks.items())
                if repeat % 2:
                    order.reverse()
                for name, stack in order:
                    number += 1
                    runs[name].append(_lifecycle(stack, repo, number))
        finally:
            for stack in stacks.values():
                stop_stack(stack)
            cluster.stop()
    results: dict[str, Any] = {"sample": SAMPLE, "repeats": budget.preview_repeats, "cores": os.cpu_count(),
                               "load_base_images_s": loaded}
    for name, samples in runs.items():
        results[name] = {"median": {key: median([run[key] for run in samples]) for key in samples[0]},
                         "runs": samples}
    return results
