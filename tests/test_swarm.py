"""End to end on a real three-node Docker Swarm made on this machine (tests/support/swarm.py): the real service
with RUNTIME=swarm, signed webhooks, git clones of local repositories, a real nginx, the fake code host, and
Debian's docker-registry as the registry every node pulls from.

The service's Docker engine is the swarm's manager; previews run on the workers. The tests reach the previews
only through nginx on 127.0.0.1 and the nodes' own addresses on the test's bridge.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from orchestrator.common.labels import DEPLOYMENT_LABEL
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import free_port, wait_until
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.support.standins import require_engine
from tests.support.swarm import SwarmCluster, SwarmUnavailable, namespaces_refused

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.swarm]

BASE_IMAGES = ("po-standin/python:test", "po-standin/postgres:test")  # what the manager's builds start from
GC_INTERVAL = 10  # seconds between the registry's garbage collections


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwarmCluster]:
    require_engine()  # before the skip: an unprepared host fails with the fix instead of skipping
    try:
        refused = namespaces_refused()
    except SwarmUnavailable as exc:
        pytest.fail(str(exc))
    if refused is not None:
        pytest.skip(refused)
    swarm = SwarmCluster(tmp_path_factory.mktemp("swarm")).start()
    try:
        swarm.load_images(*BASE_IMAGES)
        yield swarm
    finally:
        swarm.stop()


@pytest.fixture(scope="module")
def stack(cluster: SwarmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    engines = ",".join(f"{node.name}={node.host}" for node in cluster.workers)
    running = start_stack(tmp_path_factory.mktemp("swarm-e2e"), RUNTIME="swarm", DOCKER_HOST=cluster.manager.host,
                          SWARM_REGISTRY=cluster.registry, SWARM_REGISTRY_SCHEME="http",
                          SWARM_REGISTRY_USER=cluster.registry_credentials[0],
                          SWARM_REGISTRY_PASSWORD=cluster.registry_credentials[1],
                          SWARM_NODE_ENGINES=engines, HEALTH_CHECK_TIMEOUT_SECONDS="60",
                          RUNTIME_WATCH_INTERVAL_SECONDS="2", CLEANUP_RETRY_INTERVAL_SECONDS="3",
                          SWARM_REGISTRY_GC_COMMAND=f"docker-registry garbage-collect "
                                                    f"{cluster.registry_config}",
                          SWARM_REGISTRY_GC_INTERVAL_SECONDS=str(GC_INTERVAL))
    yield running
    stop_stack(running)


def placement(cluster: SwarmCluster, deployment: str) -> dict[str, str]:
    """service -> the node its running task is on."""
    output = cluster.manager.docker("stack", "ps", "--filter", "desired-state=running", "--format", "{{json .}}",
                                    deployment)
    rows = [json.loads(line) for line in output.splitlines() if line.strip()]
    return {row["Name"].removeprefix(f"{deployment}_").rsplit(".", 1)[0]: row["Node"] for row in rows}


def psql(cluster: SwarmCluster, node: str, deployment: str, sql: str) -> str:
    """Run SQL in the preview's database container, on the node that runs it (its own engine)."""
    engine = cluster.node(node)
    container = engine.docker("ps", "--quiet", "--filter", f"label=com.docker.swarm.service.name={deployment}_db")
    assert container.strip(), f"no db container of {deployment} on {node}"
    script = f'PGPASSWORD="$POSTGRES_PASSWORD" psql -h 127.0.0.1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -tA -c "{sql}"'
    return engine.docker("exec", container.split()[0], "sh", "-c", script).strip()


def left_behind(cluster: SwarmCluster, deployment: str) -> dict[str, list[str]]:
    """Everything of the deployment still on any node or in the registry."""
    found = cluster.labelled(f"{DEPLOYMENT_LABEL}={deployment}")
    for node in cluster.nodes:
        images = [line for line in node.docker("images", "--format", "{{.Repository}}").splitlines()
                  if line.startswith(f"{cluster.registry}/{deployment}/") or line.startswith(f"{deployment}-")]
        if images:
            found[f"{node.name} image"] = images
    tags = {repo: tags for repo, tags in cluster.registry_tags().items() if repo.startswith(f"{deployment}/") and tags}
    if tags:
        found["registry"] = [f"{repo}:{tag}" for repo, repo_tags in tags.items() for tag in repo_tags]
    return found


class AnswersDuring:
    """The preview's page, asked for every 50 ms in a thread while the block runs: (status, body) seen."""

    def __init__(self, stack: Stack, pr: int) -> None:
        self.stack, self.pr = stack, pr
        self.seen: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ask, daemon=True)

    def _ask(self) -> None:
        while not self._stop.wait(0.05):
            response = web.get(f"{self.stack.nginx.url}/{SLUG}/pr-{self.pr}/", timeout=30,
                               headers={"Accept": "text/plain"})
            body = "being updated" if "is being updated" in response.text else response.text
            self.seen.append((response.status_code, body))

    def __enter__(self) -> AnswersDuring:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def registry_from_preview(cluster: SwarmCluster, node: str, deployment: str,
                          requests: list[tuple[str, str]]) -> list[int]:
    """What the registry answers (method, path) asked from inside a preview's app container, as that preview's
    own code would ask it: the status of each, in order."""
    engine = cluster.node(node)
    container = engine.docker("ps", "--quiet", "--filter", f"label=com.docker.swarm.service.name={deployment}_app")
    assert container.strip(), f"no app container of {deployment} on {node}"
    script = ("import sys, urllib.request, urllib.error\n"
              "for method, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
              f"    request = urllib.request.Request('http://{cluster.registry}' + path, method=method)\n"
              "    try:\n        print(urllib.request.urlopen(request, timeout=10).status)\n"
              "    except urllib.error.HTTPError as error:\n        print(error.code)\n")
    output = engine.docker("exec", container.strip(), "python3", "-c", script,
                           *(part for request in requests for part in request))
    return [int(line) for line in output.split()]


def cleanup_incomplete(stack: Stack, deployment: str) -> bool:
    record = stack.records().get(deployment)
    return record is not None and record["status"] == "failed" and record["error"].startswith("Cleanup incomplete")


def test_previews_on_a_three_node_swarm(cluster: SwarmCluster, stack: Stack) -> None:
    first = make_pr_repo(stack.root / "repos", "python", "feature/swarm-one", config=config_for("python", "postgres"))
    stack.send("opened", 1, first, first.sha_a)
    record = stack.wait_for(1, "running", first.sha_a)
    stack.wait_page(1, "python says: commit A\n")
    assert stack.page(1, "db").text == "db reachable"
    stack.wait_comment(1, "Preview ready", record["url"])
    where = placement(cluster, f"{SLUG}-1")
    assert set(where) == {"app", "db"} and where["app"] == where["db"] != "manager"
    route = (stack.root / "proxy" / f"{SLUG}-pr-1.conf").read_text()
    assert f"proxy_pass http://{cluster.node(where['app']).address}:{record['exposedAppPort']}/;" in route

    psql(cluster, where["db"], f"{SLUG}-1", "CREATE TABLE kept (note text); INSERT INTO kept VALUES ('before')")
    with AnswersDuring(stack, 1) as answers:  # a reviewer reloading the page all through the update
        stack.send("synchronize", 1, first, first.sha_b)
        updated = stack.wait_for(1, "running", first.sha_b)
    assert stack.page(1).text == "python says: commit B\n"  # running means served by the new commit, at once
    # The old app, then "being updated" while the stop-first update has nothing on the port, never an error.
    assert set(answers.seen) <= {(200, "python says: commit A\n"), (200, "python says: commit B\n"),
                                 (503, "being updated")}, answers.seen
    assert updated["exposedAppPort"] == record["exposedAppPort"]
    assert placement(cluster, f"{SLUG}-1") == where  # pinned: the database's volume is on that node
    assert psql(cluster, where["db"], f"{SLUG}-1", "SELECT note FROM kept") == "before"

    second = make_pr_repo(stack.root / "repos", "python", "feature/swarm-two", config=config_for("python", "postgres"))
    stack.send("opened", 2, second, second.sha_a)
    stack.wait_for(2, "running", second.sha_a)
    stack.wait_page(2, "python says: commit A\n")
    other = placement(cluster, f"{SLUG}-2")
    assert other["app"] == other["db"] not in ("manager", where["app"])  # the least busy worker
    assert stack.page(1).text == "python says: commit B\n"

    # Preview 2's code reaches the registry's address, but can neither list, read, replace nor delete
    # preview 1's image there: only the service and the nodes it hands the credentials to can.
    tags = cluster.registry_tags()[f"{SLUG}-1/app"]
    assert tags
    victim = f"/v2/{SLUG}-1/app/manifests/{tags[0]}"
    answers = registry_from_preview(cluster, other["app"], f"{SLUG}-2", [
        ("GET", "/v2/_catalog"), ("GET", victim), ("DELETE", victim), ("POST", f"/v2/{SLUG}-1/app/blobs/uploads/"),
        ("PUT", victim)])
    assert answers == [401] * 5, answers
    assert cluster.registry_tags()[f"{SLUG}-1/app"] == tags
    assert stack.page(1).text == "python says: commit B\n"
    # Nor does the manager keep a tag of what it pushed, which a Dockerfile's FROM would find without credentials.
    kept = cluster.manager.docker("images", "--format", "{{.Repository}}").splitlines()
    assert not [name for name in kept if name.startswith(cluster.registry)], kept

    for pr, repo in ((2, second), (1, first)):
        stack.close(pr, repo, repo.sha_b)
        deployment = f"{SLUG}-{pr}"
        wait_until(lambda deployment=deployment: not left_behind(cluster, deployment), timeout=60,
                   message=f"nothing of {deployment} left on the swarm")
    assert "Preview removed" in stack.comment(1)


def test_what_a_swarm_cannot_honour_is_refused_with_the_reason(cluster: SwarmCluster, stack: Stack) -> None:
    """A repository's compose file with a bind mount of the checkout: the task runs on another machine."""
    compose = ("services:\n  app:\n    build: .\n    volumes:\n      - ./message.txt:/srv/message.txt:ro\n"
               "  db:\n    image: po-standin/postgres:test\n")
    repo = make_pr_repo(stack.root / "repos", "python", "feature/swarm-bind", config=config_for("python", "postgres"),
                        files={"compose.preview.yml": compose, "Dockerfile": "FROM po-standin/python:test\n"
                               "COPY . /app\nWORKDIR /app\nCMD [\"python3\", \"app.py\"]\n"})
    stack.send("opened", 3, repo, repo.sha_a)
    record = stack.wait_for(3, "failed")
    assert record["error"] == "The compose file cannot run on a Docker Swarm"
    comment = stack.wait_comment(3, "Preview failed")
    assert "bind mount of message.txt cannot be honoured on a Docker Swarm" in comment
    stack.close(3, repo, repo.sha_a)
    wait_until(lambda: not left_behind(cluster, f"{SLUG}-3"), timeout=60, message="nothing of the refused preview")


def test_doctor_reports_the_swarm(cluster: SwarmCluster, stack: Stack) -> None:
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "doctor"], cwd=stack.root,
                            env=stack.service.env, capture_output=True, text=True, timeout=120)
    report = result.stdout
    assert "✓ this Docker engine is a swarm manager (RUNTIME=swarm): manager: 1 manager(s), 3 node(s)" in report
    assert "✓ swarm nodes ready: 3 of 3 ready and active (2 workers)" in report
    assert f"✓ registry {cluster.registry} answers (SWARM_REGISTRY): v2 API" in report
    assert ("✓ the registry refuses anonymous access (SWARM_REGISTRY_USER): HTTP 401 without credentials, "
            f"200 with {cluster.registry_credentials[0]}'s") in report
    assert "✓ the nodes' own engines answer (SWARM_NODE_ENGINES): 2 configured" in report
    assert f"✓ every node pulls from {cluster.registry} (SWARM_REGISTRY): 3 of 3 nodes reach it" in report
    # a registry no node can reach is named per node, before a preview is placed there
    host = cluster.registry.rsplit(":", 1)[0]
    closed = f"{host}:{free_port()}"
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "doctor"], cwd=stack.root,
                            env={**stack.service.env, "SWARM_REGISTRY": closed}, capture_output=True, text=True,
                            timeout=180)
    line = next(line for line in result.stdout.splitlines() if "every node pulls from" in line)
    assert line.startswith(f"✗ every node pulls from {closed} (SWARM_REGISTRY): 0 of 3 nodes reach it; "), line
    assert line.count("connection refused") == 3 and "insecure-registries" in line, line


def test_a_worker_that_stops_fails_its_preview_and_the_others_keep_serving(cluster: SwarmCluster,
                                                                          stack: Stack) -> None:
    repos = {pr: make_pr_repo(stack.root / "repos", "python", f"feature/swarm-node-{pr}",
                              config=config_for("python", "postgres")) for pr in (4, 5)}
    for pr, repo in repos.items():
        stack.send("opened", pr, repo, repo.sha_a)
        stack.wait_for(pr, "running", repo.sha_a)
        stack.wait_page(pr, "python says: commit A\n")
    kept, lost = placement(cluster, f"{SLUG}-4")["app"], placement(cluster, f"{SLUG}-5")["app"]
    assert kept != lost

    cluster.stop_node(cluster.node(lost))
    record = stack.wait_for(5, "failed")
    assert record["error"] == (f"The preview's swarm node {lost} is down (it left the swarm or its engine "
                               "stopped); its database is on that node: start the node again, then push a commit, "
                               "to keep the data, or push a commit now to deploy the preview on another node with "
                               "an empty database")
    stack.wait_comment(5, "Preview failed", f"swarm node {lost} is down")
    assert stack.page(4).text == "python says: commit A\n"  # the other node's preview keeps serving

    stack.send("synchronize", 5, repos[5], repos[5].sha_b)  # the next push moves it to a node that is up
    stack.wait_for(5, "running", repos[5].sha_b)
    stack.wait_page(5, "python says: commit B\n")
    assert placement(cluster, f"{SLUG}-5")["app"] == kept
    assert "it moves to another node; its database starts empty" in stack.logs(5)

    stack.send("closed", 5, repos[5], repos[5].sha_b)  # its volume on the stopped node cannot go yet: said so
    record = stack.wait_for(5, "failed")
    assert f"node {lost}: the preview's volumes stay there (the node is down)" in record["error"]
    cluster.restart_node(cluster.node(lost))
    stack.close(5, repos[5], repos[5].sha_b)  # the node is back: everything goes
    stack.close(4, repos[4], repos[4].sha_a)
    for pr in (4, 5):
        wait_until(lambda pr=pr: not left_behind(cluster, f"{SLUG}-{pr}"), timeout=60,
                   message=f"nothing of {SLUG}-{pr} left on the swarm")


def test_a_restart_of_the_service_mid_deploy_is_reconciled(cluster: SwarmCluster, stack: Stack) -> None:
    """Killed while its stack deploys: the event is still in the inbox, so the restarted service deploys it again,
    onto the stack it had begun (same node, one stack); nothing is left after the close."""
    pr = 6
    repo = make_pr_repo(stack.root / "repos", "python", "feature/swarm-restart", config=config_for("python"))
    log = stack.root / "deployments" / SLUG / f"pr-{pr}.log"
    stack.send("opened", pr, repo, repo.sha_a)
    wait_until(lambda: log.exists() and "waiting for db" in log.read_text(), timeout=300,
               message="the stack's first wave deployed")
    stack.service.kill9()
    pinned = "{{index .Spec.Labels \"dev.preview-orchestrator.node\"}}"
    first = cluster.manager.docker("service", "inspect", "--format", pinned, f"{SLUG}-{pr}_db").strip()
    stack.service.start()
    stack.wait_for(pr, "running", repo.sha_a)
    stack.wait_page(pr, "python says: commit A\n")
    assert cluster.manager.docker("service", "inspect", "--format", pinned, f"{SLUG}-{pr}_db").strip() == first
    services = cluster.manager.docker("service", "ls", "--format", "{{.Name}}").split()
    assert sorted(services) == [f"{SLUG}-{pr}_app", f"{SLUG}-{pr}_db"]
    stack.close(pr, repo, repo.sha_a)
    wait_until(lambda: not left_behind(cluster, f"{SLUG}-{pr}"), timeout=60, message="nothing left")


def test_a_worker_that_returns_runs_its_previews_again(cluster: SwarmCluster, stack: Stack) -> None:
    """Its node stopped, then started: the preview's next push deploys there, with its data. Closed while the
    node is down: the record stays, saying why, until the node is back and the retried cleanup leaves nothing."""
    pr = 7
    deployment = f"{SLUG}-{pr}"
    repo = make_pr_repo(stack.root / "repos", "python", "feature/swarm-return", config=config_for("python", "postgres"))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    node = placement(cluster, deployment)["db"]
    psql(cluster, node, deployment, "CREATE TABLE kept (note text); INSERT INTO kept VALUES ('before')")
    cluster.stop_node(cluster.node(node))
    stack.wait_for(pr, "failed")
    cluster.restart_node(cluster.node(node))
    stack.send("synchronize", pr, repo, repo.sha_b)
    stack.wait_for(pr, "running", repo.sha_b)
    assert stack.page(pr).text == "python says: commit B\n"
    assert placement(cluster, deployment) == {"app": node, "db": node}
    assert psql(cluster, node, deployment, "SELECT note FROM kept") == "before"

    cluster.stop_node(cluster.node(node))
    stack.send("closed", pr, repo, repo.sha_b)
    wait_until(lambda: cleanup_incomplete(stack, deployment), timeout=180, message="the cleanup said what stays")
    error = stack.records()[deployment]["error"]
    # (the manager sees the node down 10-20 s after its engine stopped: until then, its engine does not answer)
    assert any(f"node {node}: the preview's volumes stay there ({why}) ({deployment}_db-data)" in error
               for why in ("the node is down", "its engine does not answer")), error
    assert not cluster.registry_tags().get(f"{deployment}/app")  # what could go went
    time.sleep(8)  # retried meanwhile (CLEANUP_RETRY_INTERVAL_SECONDS=3): the record stays while the node is down
    assert cleanup_incomplete(stack, deployment)
    cluster.restart_node(cluster.node(node))
    wait_until(lambda: deployment not in stack.records(), timeout=180, message="the retried cleanup finished")
    assert not left_behind(cluster, deployment)


def collected_since(stack: Stack, moment: datetime) -> bool:
    """The service ran the registry's garbage collection, successfully, after `moment`."""
    path = stack.root / "state" / "registry-gc.json"
    if not path.exists():
        return False
    run = json.loads(path.read_text())
    assert run["ok"], run
    return datetime.fromisoformat(run["at"]) > moment


def test_registry_space_comes_back_after_previews_close(cluster: SwarmCluster, stack: Stack) -> None:
    """Open and close previews whose images differ: once the service's garbage collection has run, the
    registry holds what it held before them (the shared mirror), not their layers."""
    now = datetime.now(UTC)
    wait_until(lambda: collected_since(stack, now), timeout=60, message="a collection before the cycles")
    start = cluster.registry_bytes()
    for cycle in range(3):
        pr = 20 + cycle
        noise = secrets.token_hex(2 * 1024 * 1024)  # 4 MiB of hex (2 MB packed), new every cycle: a layer of its own
        repo = make_pr_repo(stack.root / "repos", "python", f"feature/swarm-gc-{cycle}",
                            config=config_for("python", "postgres"), files={"noise.txt": noise})
        stack.send("opened", pr, repo, repo.sha_a)
        stack.wait_for(pr, "running", repo.sha_a)
        assert cluster.registry_bytes() > start + 1_500_000  # the preview's layer is in the registry
        stack.close(pr, repo, repo.sha_a)
    closed = datetime.now(UTC)
    wait_until(lambda: collected_since(stack, closed), timeout=60, message="a collection after the cycles")
    assert cluster.registry_bytes() <= start + 64 * 1024, (start, cluster.registry_bytes())
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "doctor"], cwd=stack.root,
                            env=stack.service.env, capture_output=True, text=True, timeout=180)
    line = next(line for line in result.stdout.splitlines() if "registry garbage collection" in line)
    assert line.startswith(f"✓ registry garbage collection (SWARM_REGISTRY_GC_COMMAND): every "
                           f"{GC_INTERVAL / 3600:g} h; last ran "), line
