"""Issue 7 over falcon.testing and small real processes: the log endpoint, the dashboard HTML, /metrics,
the code host's Deployments API calls, live log streaming from commands, and the CLI's client commands."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from falcon import testing

from orchestrator.cli.service_client import previews_table
from orchestrator.codehosts.github import GitHub, api_client
from orchestrator.common.commands import DeploymentLog, deployment_log_path, run
from orchestrator.http.app import create_app
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api import WarmPool
from orchestrator.runtime.seed_catalogue import SeedInfo, record_seed, warm_pools
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, StoreFile
from orchestrator.state.store import DeploymentStore
from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.handlers import RecordingHandler
from tests.support.live import ServiceProcess, wait_until
from tests.support.payloads import REPO_ROOT, fixture_bytes, pr_payload, webhook_headers

TOKEN = "test-token-abcdef"  # conftest's CODEHOST_TOKEN


def put(store: DeploymentStore, pr: int, status: str = "running", branch: str = "feature/x",
        error: str | None = None, age: timedelta = timedelta(minutes=5)) -> DeploymentRecord:
    created = datetime.now(UTC) - age
    record = DeploymentRecord(
        prNumber=pr, repoName="Hello-World", repoOwner="Codertocat", projectSlug="codertocat-hello-world",
        deploymentId=f"codertocat-hello-world-{pr}", branch=branch, commitSha="0123456789abcdef" * 2 + "01234567",
        framework="go", dbType="postgres", appPort=8080, exposedAppPort=8000 + pr, exposedDbPort=9000 + pr,
        status=status, createdAt=created, updatedAt=created, url=f"http://previews.test/codertocat-hello-world/pr-{pr}/",
        error=error)

    def change(data: StoreFile) -> None:
        data.deployments[record.deploymentId] = record

    store.update(change)
    return record


def write_log(settings: Settings, pr: int, text: str) -> Path:
    path = deployment_log_path(settings.deployments_dir, "codertocat-hello-world", pr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# The deployment log --------------------------------------------------------------------------


def test_log_is_served_as_text_with_secrets_masked(client: testing.TestClient, store: DeploymentStore,
                                                   settings: Settings) -> None:
    put(store, 7)
    cache = "#9 RUN --mount=type=cache,target=/root/.npm,id=po-cache-0123456789abcdef0123456789abcdef npm ci"
    built = "#12 naming to docker.io/po-build/7f798c9589209d9e72ce267edf43488a-app done"
    write_log(settings, 7, f"$ git clone\nremote: using {TOKEN}\n{cache}\n{built}\nexit 0\n")
    result = client.simulate_get("/api/previews/codertocat-hello-world-7/logs")
    assert result.status_code == 200
    assert result.headers["content-type"] == "text/plain; charset=utf-8"
    # a repository's cache ids and built images' names too: a base image's ONBUILD could write into that cache
    assert result.text == ("$ git clone\nremote: using ***\n"
                           "#9 RUN --mount=type=cache,target=/root/.npm,id=po-cache-*** npm ci\n"
                           "#12 naming to docker.io/po-build/***-app done\nexit 0\n")


def test_log_errors_are_the_usual_json(client: testing.TestClient, store: DeploymentStore,
                                       settings: Settings) -> None:
    missing = client.simulate_get("/api/previews/codertocat-hello-world-8/logs")
    assert missing.status_code == 404 and missing.json == {"error": "Deployment not found"}
    invalid = client.simulate_get("/api/previews/..%2F..%2Fetc/logs")
    assert invalid.status_code == 400 and invalid.json == {"error": "Invalid deployment id"}
    put(store, 8)
    bad_flag = client.simulate_get("/api/previews/codertocat-hello-world-8/logs", params={"follow": "maybe"})
    assert bad_flag.status_code == 400 and "follow" in bad_flag.json["error"]
    assert client.simulate_delete("/api/previews/codertocat-hello-world-8/logs").status_code == 405
    assert client.simulate_get("/api/previews/codertocat-hello-world-8").status_code == 405
    # A preview with no log yet (still queued) has an empty one.
    empty = client.simulate_get("/api/previews/codertocat-hello-world-8/logs")
    assert empty.status_code == 200 and empty.text == ""


async def test_follow_streams_new_lines_until_the_flow_ends(settings: Settings, store: DeploymentStore,
                                                           handler: RecordingHandler) -> None:
    put(store, 9, status="building")
    path = write_log(settings, 9, "first line\n")
    app = create_app(settings, handler)
    received = b""

    async def until(expected: bytes, timeout: float = 10.0) -> None:
        nonlocal received
        deadline = asyncio.get_running_loop().time() + timeout
        while not received.endswith(expected):
            assert asyncio.get_running_loop().time() < deadline, f"got {received!r}, wanted {expected!r}"
            received += await stream.stream.read()
            await asyncio.sleep(0.05)

    async with testing.ASGIConductor(app) as conductor:
        async with conductor.simulate_get_stream("/api/previews/codertocat-hello-world-9/logs",
                                                 params={"follow": "true"}) as stream:
            try:
                await until(b"first line\n")
                with path.open("a") as handle:
                    handle.write(f"second with {TOKEN}\npartial")
                await until(b"second with ***\n")  # whole lines only, masked
                await asyncio.sleep(1.2)  # two polls: the unfinished line is held back
                assert received == b"first line\nsecond with ***\n"
            finally:
                put(store, 9, status="running")  # the flow ends: the stream sends what is left and closes
            await until(b"partial")
    assert received == b"first line\nsecond with ***\npartial"


def test_commands_write_output_to_the_log_while_they_run(tmp_path: Path) -> None:
    log = DeploymentLog(tmp_path / "pr-1.log")
    done = threading.Event()

    def slow() -> None:
        run(["sh", "-c", "echo first; sleep 3; echo second"], cwd=None, env={"PATH": "/usr/bin:/bin"},
            timeout=30, log=log)
        done.set()

    threading.Thread(target=slow).start()
    wait_until(lambda: log.path.exists() and "first" in log.path.read_text(), timeout=2.5,
               message="first line in the log before the command ends")
    assert not done.is_set()
    assert done.wait(10)
    assert re.search(r"first\nsecond\n\[.*\] exit 0 after", log.path.read_text())


# The dashboard ---------------------------------------------------------------------------------


def test_dashboard_lists_previews_escaped_and_self_contained(client: testing.TestClient,
                                                             store: DeploymentStore) -> None:
    put(store, 3, status="failed", branch="<script>alert(1)</script>", error="Docker build failed",
        age=timedelta(hours=2, minutes=5))
    put(store, 4, status="building")
    for path in ("/", "/dashboard"):
        page = client.simulate_get(path)
        assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
        html = page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
        assert 'data-id="codertocat-hello-world-3"' in html and 'data-id="codertocat-hello-world-4"' in html
        assert "status-failed" in html and "Docker build failed" in html and "2h05m" in html
        assert 'href="/api/previews/codertocat-hello-world-3/logs"' in html
        assert 'href="http://previews.test/codertocat-hello-world/pr-3/"' in html
        # No external assets: no src= or stylesheet link at all, and the CSP forbids them anyway.
        assert not re.search(r"<(script|img|link)[^>]+(src|href)=\"(?!data:)", html)
        assert "default-src 'none'" in page.headers["content-security-policy"]


def test_dashboard_with_no_previews_says_so(client: testing.TestClient) -> None:
    assert "No previews yet" in client.simulate_get("/").text


def test_dashboard_lists_what_the_runtime_keeps_warm_per_repository(settings: Settings, handler: RecordingHandler,
                                                                    tmp_path: Path) -> None:
    """The compose runtime's pools (seed_catalogue.warm_pools): each repository's seed and its free spare layers,
    from the files the seeds leave; a seed's source, written by a pull request's preview-config.yml, escaped."""
    data, spares = tmp_path / "state" / "database-seeds" / "data", tmp_path / "state" / "database-seeds" / "spares"
    now = datetime.now(UTC).timestamp()
    for key, repository, source, used in (("a" * 20, "github/acme/shop", "file <b>seeds/a.sql</b>", now - 2 * 3600),
                                          ("b" * 20, "gitea/acme/api", "snapshot prod", now - 3 * 3600)):
        record_seed(data, SeedInfo(key=key, repository=repository, source=source, image="postgres:16",
                                   size_bytes=300 * 2**20, made_at=used, seconds=4.0, used_at=used))
        os.utime(data / f"{key}.json", (used, used))
    spares.mkdir(parents=True)
    for nonce in ("00000001", "00000002"):  # two free spares of the first seed, none of the second
        (spares / f"po-spare-0123456789ab-{'a' * 20}-{nonce}").write_text("{}")
    # a base preview's installed dependencies (flows/base_dependencies.py): listed, bounded by BASE_PREVIEWS
    dependencies = WarmPool(repository="github/acme/shop", kind="installed dependencies", count=1,
                            size_bytes=900 * 2**20, bound="BASE_PREVIEWS")
    handler.pools = lambda: [*warm_pools(tmp_path / "state"), dependencies]  # type: ignore[attr-defined]
    html = testing.TestClient(create_app(settings, handler)).simulate_get("/dashboard").text
    table = html.split('<table id="pools"', 1)[1].split("</table>", 1)[0]
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in table.split("<tr>")[2:]]
    assert [row[:4] for row in rows] == [["github/acme/shop", "database seed", "1", "300 MB"],
                                         ["github/acme/shop", "spare layers", "2", "600 MB"],
                                         ["gitea/acme/api", "database seed", "1", "300 MB"],
                                         ["github/acme/shop", "installed dependencies", "1", "900 MB"]]
    assert rows[0][4] == "2h00m ago" and "file &lt;b&gt;seeds/a.sql&lt;/b&gt;" in table and "<b>" not in table
    # the seeds' and spares' sum against their bound, without the dependencies
    assert f"seeds and spares 1.17 GB of SEED_CACHE_GB {settings.seed_cache_gb:g} GB" in html


def test_dashboard_says_when_nothing_is_kept_warm(client: testing.TestClient) -> None:
    html = client.simulate_get("/dashboard").text
    assert '<table id="pools" hidden>' in html and "Nothing kept warm" in html


def test_dashboard_without_the_runtime_s_pools_still_lists_the_previews(settings: Settings, handler: RecordingHandler,
                                                                        store: DeploymentStore) -> None:
    put(store, 3)

    def broken() -> list[object]:
        raise OSError("the state directory could not be read")

    handler.pools = broken  # type: ignore[attr-defined]
    page = testing.TestClient(create_app(settings, handler)).simulate_get("/dashboard")
    assert page.status_code == 200 and 'data-id="codertocat-hello-world-3"' in page.text
    assert "What is kept warm could not be listed" in page.text


# /metrics ---------------------------------------------------------------------------------------


def sample(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$", text, re.M)
    return float(match[1]) if match else 0.0


def test_metrics_count_webhooks_and_describe_state(client: testing.TestClient, store: DeploymentStore) -> None:
    body = pr_payload("opened", number=5)
    assert client.simulate_post("/webhook/codehost", body=body, headers=webhook_headers(body)).status_code == 200
    ping = fixture_bytes("ping")
    client.simulate_post("/webhook/codehost", body=ping, headers=webhook_headers(ping, event="ping"))
    bad = webhook_headers(body) | {"X-Hub-Signature-256": "sha256=" + "0" * 64}
    assert client.simulate_post("/webhook/codehost", body=body, headers=bad).status_code == 401
    weird = webhook_headers(body, event="x" * 300)
    client.simulate_post("/webhook/codehost", body=body, headers=weird)
    put(store, 6, status="failed")
    result = client.simulate_get("/metrics")
    assert result.status_code == 200 and result.headers["content-type"].startswith("text/plain; version=")
    text = result.text
    assert sample(text, "preview_orchestrator_webhooks_total", 'event="pull_request",outcome="accepted"') == 1
    assert sample(text, "preview_orchestrator_webhooks_total", 'event="ping",outcome="ignored"') == 1
    assert sample(text, "preview_orchestrator_webhooks_total", 'event="pull_request",outcome="unauthorized"') == 1
    assert sample(text, "preview_orchestrator_webhooks_total", 'event="other",outcome="ignored"') == 1
    assert "x" * 300 not in text  # a sender cannot create label values
    assert sample(text, "preview_orchestrator_previews", 'status="failed"') == 1
    assert sample(text, "preview_orchestrator_previews", 'status="running"') == 1  # the recorded PR 5
    assert sample(text, "preview_orchestrator_previews_running") == 1
    assert "preview_orchestrator_queue_depth 0.0" in text
    for family in ("deploy_duration_seconds histogram", "health_check_duration_seconds histogram",
                   "codehost_requests_total counter", "codehost_retries_total counter", "deploys_total counter"):
        assert f"# TYPE preview_orchestrator_{family}\n" in text


def test_two_apps_never_share_counters(settings: Settings, handler: RecordingHandler) -> None:
    first, second = testing.TestClient(create_app(settings, handler)), testing.TestClient(create_app(settings, handler))
    ping = fixture_bytes("ping")
    first.simulate_post("/webhook/codehost", body=ping, headers=webhook_headers(ping, event="ping"))
    assert sample(first.simulate_get("/metrics").text, "preview_orchestrator_webhooks_total",
                  'event="ping",outcome="ignored"') == 1
    assert sample(second.simulate_get("/metrics").text, "preview_orchestrator_webhooks_total",
                  'event="ping",outcome="ignored"') == 0


# The code host's Deployments API -----------------------------------------------------------------


def test_deployments_api_calls_have_githubs_shape_and_are_retried() -> None:
    fake = FakeCodeHost().start()
    metrics = Metrics()
    try:
        api = api_client(fake.url, "token-1", retry_base=0.01, sleep=lambda _: None, metrics=metrics)
        host = GitHub(api, fake.url, "token-1", "webhook-secret")
        fake.fail_next(1, 502)
        deployment = host.start_deployment("acme", "api", "a" * 40, "preview/acme-api/pr-3", "Preview of #3")
        host.set_status("acme", "api", "a" * 40, deployment, "success", "running",
                        url="http://previews.test/acme-api/pr-3/")
        [created] = fake.deployments_of("acme", "api", "preview/acme-api/pr-3")
        assert created["ref"] == "a" * 40
        assert created["request"]["required_contexts"] == [] and created["request"]["auto_merge"] is False
        assert created["request"]["production_environment"] is False
        assert created["statuses"] == [{"state": "success", "description": "running",
                                        "environment_url": "http://previews.test/acme-api/pr-3/"}]
        posts = [c for c in fake.calls if c.path == "/repos/acme/api/deployments"]
        assert [c.status for c in posts] == [502, 201]
        assert posts[-1].headers["Authorization"] == "Bearer token-1"
        text = metrics.exposition().decode()
        assert 'preview_orchestrator_codehost_retries_total{kind="deployment"} 1.0' in text
        assert 'preview_orchestrator_codehost_requests_total{kind="deployment",status="502"} 1.0' in text
    finally:
        fake.stop()


# CLI client commands ------------------------------------------------------------------------------


def test_list_table_is_readable() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    rows = [{"deploymentId": "acme-api-12", "status": "failed", "error": "Health check timeout", "prNumber": 12,
             "branch": "feature/login", "commitSha": "abcdef0123456789", "createdAt": "2026-11-22T10:30:00+00:00",
             "url": "http://previews.test/acme-api/pr-12/", "projectSlug": "acme-api"},
            {"deploymentId": "acme-api-3", "status": "running", "error": None, "prNumber": 3, "branch": "fix",
             "commitSha": "1234567890", "createdAt": "2026-11-20T11:00:00+00:00",
             "url": "http://previews.test/acme-api/pr-3/", "projectSlug": "acme-api", "codehost": "gitea"}]
    assert previews_table(rows, now).splitlines() == [
        "ID           STATUS                         HOST    PR   BRANCH         COMMIT   AGE    URL",
        "acme-api-3   running                        gitea   #3   fix            1234567  2d01h  http://previews.test/acme-api/pr-3/",
        "acme-api-12  failed (Health check timeout)  github  #12  feature/login  abcdef0  1h30m  http://previews.test/acme-api/pr-12/",
    ]


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "PREVIEW_ORCHESTRATOR_URL": url}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_cli_talks_to_the_running_service(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    with ServiceProcess(tmp_path, EVENT_HANDLER="tests.support.handlers:from_env",
                        TEST_JOURNAL=str(journal)) as service:
        assert run_cli("list", url=service.url).stdout == "No previews.\n"
        body = pr_payload("opened", number=12)
        assert web.post(f"{service.url}/webhook/codehost", content=body,
                        headers=webhook_headers(body)).status_code == 200
        wait_until(lambda: "codertocat-hello-world-12" in run_cli("list", url=service.url).stdout, timeout=10)
        listed = run_cli("list", url=service.url).stdout.splitlines()
        assert listed[0].split()[:4] == ["ID", "STATUS", "HOST", "PR"] and listed[1].split()[:4] == [
            "codertocat-hello-world-12", "running", "github", "#12"]
        as_json = run_cli("list", "--json", url=service.url)
        assert '"deploymentId": "codertocat-hello-world-12"' in as_json.stdout.replace('":"', '": "')
        logs = run_cli("logs", "codertocat-hello-world-12", url=service.url)
        assert logs.returncode == 0 and logs.stdout == ""  # the recording handler writes no log
        hostile = run_cli("cleanup", "../plugins", url=service.url)
        assert hostile.returncode == 1 and "invalid deployment id '../plugins'" in hostile.stderr
        missing = run_cli("cleanup", "codertocat-hello-world-99", url=service.url)
        assert missing.returncode == 1 and "Deployment not found" in missing.stderr
        removed = run_cli("cleanup", "codertocat-hello-world-12", url=service.url)
        assert removed.returncode == 0 and "Preview codertocat-hello-world-12 cleaned up" in removed.stdout
        assert run_cli("list", url=service.url).stdout == "No previews.\n"
    unreachable = run_cli("list", url=service.url)
    assert unreachable.returncode == 2 and f"cannot reach the service at {service.url}" in unreachable.stderr

