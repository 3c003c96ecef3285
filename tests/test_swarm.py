"""End to end on a real three-node Docker Swarm made on this machine (tests/support/swarm.py): the real service
with RUNTIME=swarm, signed webhooks, git clones of local repositories, a real nginx, the fake code host, and
Debian's docker-registry as the registry every node pulls from.

The service's Docker engine is the swarm's manager; previews run on the workers. The tests reach the previews
only through nginx on 127.0.0.1 and the nodes' own addresses on the test's bridge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from orchestrator.common.labels import DEPLOYMENT_LABEL
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
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
                          SWARM_NODE_ENGINES=engines, HEALTH_CHECK_TIMEOUT_SECONDS="60")
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
