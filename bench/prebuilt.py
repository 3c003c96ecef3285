"""(10) The first pull request of a repository with a base preview (BASE_PREVIEWS), against the naive raw path on a
cold machine (issue 35's first two targets).

Each repeat starts from a cold engine: the benchmark's app images removed and, with `prune_engine_caches`, the
whole build cache pruned (only the base images stay, as if pulled).

Raw: what a person does for the pull request's commit on that cold machine: `git clone` + the same rendered
Dockerfile and compose file + `docker compose up -d --build` + polling until the page shows the commit.

Service: the repository is named in BASE_PREVIEWS, and a `push` to its default branch (commit A) makes the base
preview — ahead of time, not timed: that is the point of it (the benchmark waits until the database seed it
leaves behind is made, as the minutes or hours between a push and the next pull request would). Then a pull
request opens: from its signed `opened` webhook until the record says `running` and its page through nginx shows
the pull request's commit. The service runs with the user's health settings (5 s / 60 s).

Scenarios (`Budget.prebuilt_scenarios`):
- `go`: the Go sample with PostgreSQL; the pull request changes the app's code (commit B), not its dependencies.
- `nestjs`: `bench/samples/nestjs`, a NestJS app with its npm dependencies (120 packages from the npm registry,
  which builds reach here; so this scenario is not part of the smoke run); the pull request changes the code.
- `nestjs-deps`: the same repository; the pull request changes only package.json and package-lock.json (one
  dependency added, `bench/samples/nestjs-deps`): `npm ci` runs again on both sides.
Targets: at most 0.3 x the raw path for a code change, 0.5 x for a dependency-only change.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO_ROOT, Budget, scratch
from bench.preview import POLL_SECONDS, RawSide, ServiceSide, _forget_app_images, _poll
from bench.stats import median
from tests.support.git_repos import PullRequestRepo, git, make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import push_payload, webhook_headers
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

DEFAULT_BRANCH = "main"
PULL_BRANCH = "feature/first"
SEED_KEY = re.compile(r"[0-9a-f]{20}")  # a database seed's marker file (orchestrator/runtime/database_seeds.py)
SAMPLES = REPO_ROOT / "bench" / "samples"


@dataclass(frozen=True)
class Scenario:
    sample: str  # a sample app's directory (tests/sample_apps/<name>, or a path)
    page: str  # what the pull request's page says
    target: float  # of the raw path
    manifests: tuple[str, ...] = field(default=())  # a dependency-only change: these files from `manifests_from`
    manifests_from: Path | None = None


SCENARIOS = {
    "go": Scenario("go", "go says: commit B\n", 0.3),
    "nestjs": Scenario(str(SAMPLES / "nestjs"), "nestjs says: commit B\n", 0.3),
    "nestjs-deps": Scenario(str(SAMPLES / "nestjs"), "nestjs says: commit A\n", 0.5,
                            ("package.json", "package-lock.json"), SAMPLES / "nestjs-deps"),
}


def repository(root: Path, scenario: Scenario) -> PullRequestRepo:
    """A bare repository whose default branch is at commit A and whose pull request's branch is at the commit the
    scenario changes: commit B (a code change), or A with only the dependency manifests changed."""
    made = make_pr_repo(root, scenario.sample, DEFAULT_BRANCH)
    bare = Path(made.clone_url)
    head = made.sha_b
    if scenario.manifests_from is not None:
        work = root / "manifests-work"
        git(root, "clone", "-q", str(bare), str(work))
        git(work, "checkout", "-q", "-b", PULL_BRANCH, made.sha_a)
        for name in scenario.manifests:
            shutil.copyfile(scenario.manifests_from / name, work / name)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "dependencies only")
        head = git(work, "rev-parse", "HEAD")
        git(work, "push", "-q", "origin", f"{PULL_BRANCH}:{PULL_BRANCH}")
    git(bare, "update-ref", f"refs/heads/{PULL_BRANCH}", head)
    git(bare, "update-ref", f"refs/heads/{DEFAULT_BRANCH}", made.sha_a)
    git(bare, "symbolic-ref", "HEAD", f"refs/heads/{DEFAULT_BRANCH}")
    return PullRequestRepo(clone_url=made.clone_url, branch=PULL_BRANCH, sha_a=made.sha_a, sha_b=head)


def raw_first(root: Path, repo: PullRequestRepo, number: int, page: str) -> float:
    """The raw path for the pull request's commit, on a cold machine: clone, `up -d --build`, its first page."""
    raw = RawSide(root, repo)
    began = time.perf_counter()
    project = raw.start(number, repo.sha_b)
    _poll(f"http://127.0.0.1:{raw.app_port(number)}/", page)
    seconds = time.perf_counter() - began
    raw.remove(project)
    return seconds


def base_ahead(stack: Stack, repo: PullRequestRepo) -> float:
    """The push that makes the base preview (a code host's `push` webhook); its seconds until `running`."""
    began = time.perf_counter()
    body = push_payload(f"refs/heads/{DEFAULT_BRANCH}", repo.sha_a, repo.clone_url, DEFAULT_BRANCH)
    answer = httpx.post(f"{stack.service.url}/webhook/codehost", content=body,
                        headers=webhook_headers(body, event="push"), timeout=10)
    answer.raise_for_status()
    ServiceSide(stack, repo).wait_running(0, repo.sha_a)
    seconds = time.perf_counter() - began
    # What the base preview leaves warm once it runs: the database image's seed, made in the background
    seeds = stack.root / "state" / "database-seeds"
    wait_until(lambda: any(SEED_KEY.fullmatch(p.name) for p in seeds.glob("*") if p.is_file()), timeout=300,
               message="the database seed the base preview makes")
    return seconds


def service_first(stack: Stack, repo: PullRequestRepo, number: int, page: str) -> float:
    side = ServiceSide(stack, repo)
    began = time.perf_counter()
    stack.send("opened", number, repo, repo.sha_b)
    side.wait_running(number, repo.sha_b)
    _poll(f"{stack.nginx.url}/{SLUG}/pr-{number}/", page)
    return time.perf_counter() - began


def run_scenario(budget: Budget, scenario: Scenario, first_number: int) -> dict[str, Any]:
    runs: list[dict[str, float]] = []
    for repeat in range(budget.preview_repeats):
        with scratch("prebuilt") as root:
            repo = repository(root, scenario)
            _forget_app_images(budget.prune_engine_caches)
            raw_s = raw_first(root, repo, first_number + 100 + repeat, scenario.page)
            _forget_app_images(budget.prune_engine_caches)
            stack = start_stack(root / "stack", own_key=budget.prune_engine_caches,
                                BASE_PREVIEWS="Codertocat/Hello-World",
                                RECONCILE_INTERVAL_MINUTES="0", HEALTH_CHECK_INTERVAL_SECONDS="5",
                                HEALTH_CHECK_TIMEOUT_SECONDS="60", LOG_LEVEL="info")
            try:
                base_s = base_ahead(stack, repo)
                first_s = service_first(stack, repo, first_number + repeat, scenario.page)
            finally:
                stop_stack(stack)
                _forget_app_images(prune_engine_caches=False)
        runs.append({"raw_first_s": raw_s, "base_preview_s": base_s, "service_first_s": first_s})
    figures = {key: median([run[key] for run in runs]) for key in runs[0]}
    return {"sample": Path(scenario.sample).name, "dependencies_only": bool(scenario.manifests),
            "median": figures, "runs": runs,
            "targets": {"first_pr_vs_raw": figures["service_first_s"] / figures["raw_first_s"],
                        "target": scenario.target}}


def bench_prebuilt(budget: Budget) -> dict[str, Any]:
    scenarios = {name: run_scenario(budget, SCENARIOS[name], 200 + 10 * index)
                 for index, name in enumerate(budget.prebuilt_scenarios)}
    return {"repeats": budget.preview_repeats, "poll_seconds": POLL_SECONDS, "cores": os.cpu_count(),
            "cold_cache_pruned": budget.prune_engine_caches, "scenarios": scenarios}
