"""(8) The reconcile against the code host and the delivery log, at the scale a busy team has: 1,000 open pull
requests across 50 repositories, on the fake code host (GitHub's listing: 100 a page, Link, ETag, rate limit
headers; tests/support/fake_codehost.py) over real HTTP on 127.0.0.1.

A look is `CodeHostReconcile.check()` as the service runs it: one paged listing per repository, then the
comparison with the store's records and the inbox's clock, then the corrections queued through the inbox. Three
looks: the first after a restart with every preview known (nothing to correct), the second with nothing changed on
the host (every page a 304: GitHub does not count those against the rate limit), the third after 10 pushes and 10
closes no webhook reported (10 synchronize and 10 closed queued). Reported: wall time, API requests made and the
rate limit they spent, corrections queued. And the delivery log: bytes per entry and the time to record one, from
DELIVERY_LOG_DAYS' worth of a busy service's deliveries.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import Budget, scratch
from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.events.codehost_reconcile import CodeHostReconcile
from orchestrator.events.delivery_log import DeliveryLog, Entry
from orchestrator.events.inbox import Inbox
from orchestrator.observability.metrics import Metrics
from orchestrator.rendering.plugin_host import CodeHosts
from orchestrator.settings import load_settings
from orchestrator.state.records import DeploymentRecord, PullRequestEvent
from orchestrator.state.store import DeploymentStore
from tests.support.fake_codehost import FakeCodeHost


class _Nudged:
    def notify(self) -> None:
        pass


def bench_reconcile(budget: Budget) -> dict[str, Any]:
    repositories, per_repository = budget.reconcile_repositories, budget.reconcile_pulls
    fake = FakeCodeHost().start()
    try:
        with scratch("reconcile") as root:
            names = [f"team/service-{n:02d}" for n in range(repositories)]
            settings = load_settings(_env_file=None, codehost_webhook_secret="s" * 20, allowed_repos=",".join(names),
                                     deployments_db=root / "deployments.json", codehost_api_url=fake.url,
                                     reconcile_interval_minutes=10)
            store, inbox, metrics = DeploymentStore(settings.deployments_db), Inbox(root / "inbox.sqlite3"), Metrics()
            old = datetime.now(UTC) - timedelta(hours=1)
            records: dict[str, DeploymentRecord] = {}
            for name in names:
                owner, repo = name.split("/")
                for number in range(1, per_repository + 1):
                    sha = f"{number:040x}"
                    fake.open_pull(owner, repo, number, f"feature-{number}", sha, f"https://github.com/{name}.git")
                    deployment = f"team-{repo}-{number}"
                    records[deployment] = DeploymentRecord(
                        prNumber=number, repoName=repo, repoOwner=owner, projectSlug=f"team-{repo}",
                        deploymentId=deployment, branch=f"feature-{number}", commitSha=sha, framework="go",
                        dbType="postgres", appPort=8080, exposedAppPort=8000, exposedDbPort=9000, status="running",
                        createdAt=old, updatedAt=old, url="http://x/")
            store.update(lambda data: data.deployments.update(records))
            host = GitHub(api_client(fake.url, "t0ken", metrics=metrics), fake.url, "t0ken", "s" * 20)
            reconcile = CodeHostReconcile(CodeHosts([host]), settings, store, inbox, _Nudged(),  # type: ignore[arg-type]
                                          metrics)
            looks = [_look("after a restart, nothing to correct", reconcile, fake)]
            looks.append(_look("nothing changed (conditional requests)", reconcile, fake))
            changed = min(10, per_repository)
            for index in range(changed):
                owner, repo = names[index].split("/")
                fake.push_pull(owner, repo, 1, f"{9999:040x}")
                fake.close_pull(owner, repo, 2 if per_repository > 1 else 1)
            looks.append(_look(f"{changed} pushes and {changed} closes missed", reconcile, fake))
            inbox.close()
            log = _delivery_log(root, budget.delivery_log_entries)
    finally:
        fake.stop()
    return {"repositories": repositories, "open_pull_requests": repositories * per_repository, "looks": looks,
            "interval_minutes_default": 10, "delivery_log": log}


def _look(name: str, reconcile: CodeHostReconcile, fake: FakeCodeHost) -> dict[str, Any]:
    calls_before, remaining_before = len(fake.listing_calls()), fake.rate_remaining
    started = time.perf_counter()
    queued = asyncio.run(reconcile.check())
    seconds = time.perf_counter() - started
    calls = fake.listing_calls()[calls_before:]
    return {"look": name, "seconds": seconds, "requests": len(calls),
            "not_modified": sum(call.status == 304 for call in calls),
            "rate_limit_spent": remaining_before - fake.rate_remaining, "corrections": queued}


def _delivery_log(root: Any, entries: int) -> dict[str, Any]:
    """`entries` deliveries as a busy service receives them (accepted ones keep their event), then the size."""
    log = DeliveryLog(root / "deliveries.sqlite3", keep_days=14)
    event = PullRequestEvent(delivery_id="d", action="synchronize", deployment_id="team-service-01-7",
                             project_slug="team-service-01", repo_owner="team", repo_name="service-01", pr_number=7,
                             branch="feature-7", commit_sha="a" * 40, clone_url="https://github.com/team/x.git",
                             received_at=datetime.now(UTC))
    started = time.perf_counter()
    for n in range(entries):
        accepted = n % 3 == 0
        log.record(Entry(codehost="github", outcome="accepted" if accepted else "ignored", status=200,
                         delivery_id=f"{n:08d}-0000-0000-0000-000000000000", event="pull_request",
                         repository="team/service-01", pr_number=7, action="synchronize",
                         reason=None if accepted else "pull request #7: labeled 'x': not PREVIEW_LABEL",
                         kept_event=event.model_copy(update={"delivery_id": str(n)}) if accepted else None))
    per_entry_ms = (time.perf_counter() - started) * 1000 / max(1, entries)
    log.close()
    size = sum(path.stat().st_size for path in root.glob("deliveries.sqlite3*"))
    return {"entries": entries, "bytes": size, "bytes_per_entry": size / max(1, entries),
            "record_ms": per_entry_ms}
