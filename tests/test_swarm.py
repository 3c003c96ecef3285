"""End to end on a real three-node Docker Swarm made on this machine (tests/support/swarm.py): the real service
with RUNTIME=swarm, signed webhooks, git clones of local repositories, a real nginx, the fake code host, and
Debian's docker-registry as the registry every node pulls from.

The service's Docker engine is the swarm's manager; previews run on the workers. The tests reach the previews
only through nginx on 127.0.0.1 and the nodes' own addresses on the test's bridge.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from orchestrator.common.labels import DEPLOYMENT_LABEL
from tests.support.git_repos import make_pr_repo
from tests.support.live import free_port, wait_until
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.support.standins import require_engine
from tests.support.swarm import SwarmCluster, namespaces_refused

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.swarm]

BASE_IMAGES = ("po-standin/python:test", "po-standin/postgres:test")  # what the manager's builds start from


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwarmCluster]:
    if (reason := namespaces_refused()) is not None:
        pytest.skip(reason)
    require_engine()
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
                          SWARM_NODE_ENGINES=engines, HEALTH_CHECK_TIMEOUT_SECONDS="60",
                          RUNTIME_WATCH_INTERVAL_SECONDS="2")
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
    stack.send("synchronize", 1, first, first.sha_b)
    updated = stack.wait_for(1, "running", first.sha_b)
    stack.wait_page(1, "python says: commit B\n")
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
                               "stopped); push a commit to deploy it on another node")
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
