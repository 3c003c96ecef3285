"""The swarm runtime's parts that need no swarm: the compose file turned into a stack file (and what is
refused), the settings, task states read as problems, an update's roll-out, registry names, the registry
collection's gate, and the optional `app_address`."""

from __future__ import annotations

import copy
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.common.deployment_log import DeploymentLog
from orchestrator.common.flow_control import FlowAborted, FlowControl, unlimited
from orchestrator.plugin_api import Check, Runtime, RuntimeFailure, read_own_settings
from orchestrator.runtime.swarm.cli import SwarmNode, Task
from orchestrator.runtime.swarm.gc import GC_FILE, GcRun, PushGate, due
from orchestrator.runtime.swarm.registry import Registry
from orchestrator.runtime.swarm.stack import FORMER_LABEL, NODE_LABEL, StackRefused, plan_stack
from orchestrator.runtime.swarm.tasks import await_rollout, task_problem
from orchestrator.settings import SettingsError
from tests.conftest import SettingsFactory
from tests.support.nginx import subject_of

DEP = "acme-api-3"
LABEL = {"dev.preview-orchestrator.deployment": DEP}
RESOURCES = {"resources": {"limits": {"cpus": 0.5, "memory": "536870912"},
                           "reservations": {"cpus": 0.25, "memory": "268435456"}}, "placement": {}}
# `docker compose config --format json` of a generated python + postgres + redis preview (trimmed).
GENERATED: dict[str, Any] = {
    "name": DEP,
    "networks": {"default": {"name": f"{DEP}_default", "ipam": {}, "labels": LABEL}},
    "services": {
        "app": {"build": {"context": "/w", "dockerfile": "Dockerfile.preview-orchestrator"}, "command": None,
                "container_name": "acme-api-pr-3-app",
                "depends_on": {"db": {"condition": "service_healthy", "required": True},
                               "redis": {"condition": "service_healthy", "required": True}},
                "deploy": RESOURCES, "entrypoint": None, "environment": {"PORT": "8000", "UNSET": None},
                "labels": LABEL, "networks": {"default": None},
                "ports": [{"mode": "ingress", "host_ip": "127.0.0.1", "target": 8000, "published": "8003",
                           "protocol": "tcp"}], "restart": "no"},
        "db": {"container_name": "acme-api-pr-3-db", "deploy": RESOURCES, "image": "postgres:16",
               "environment": {"POSTGRES_DB": "pr_3"}, "labels": LABEL, "networks": {"default": None},
               "healthcheck": {"test": ["CMD", "pg_isready"], "interval": "2s", "retries": 30},
               "ports": [{"mode": "ingress", "host_ip": "127.0.0.1", "target": 5432, "published": "9003",
                          "protocol": "tcp"}],
               "volumes": [{"type": "volume", "source": "db-data", "target": "/var/lib/postgresql/data",
                            "volume": {}}]},
        "redis": {"command": ["redis-server"], "deploy": RESOURCES, "image": "redis:7", "labels": LABEL,
                  "networks": {"default": None}},
    },
    "volumes": {"db-data": {"name": f"{DEP}_db-data", "labels": LABEL}},
}
IMAGES = {name: f"reg:5000/{DEP}/{name}:abc" for name in ("app", "db", "redis")}


def plan(document: dict[str, Any] | None = None, **changes: Any):  # noqa: ANN201
    document = copy.deepcopy(document or GENERATED)
    for service, options in changes.items():
        document["services"][service].update(options)
    return plan_stack(document, DEP, IMAGES, "node-a")


def test_a_generated_preview_becomes_a_pinned_stack_with_the_app_port_in_host_mode() -> None:
    result = plan()
    stack = result.document
    assert stack["version"] == "3.9" and "name" not in stack
    app, db = stack["services"]["app"], stack["services"]["db"]
    assert app["image"] == IMAGES["app"] and "build" not in app and "container_name" not in app
    assert "depends_on" not in app and "restart" not in app and "command" not in app
    assert app["environment"] == {"PORT": "8000"}
    assert app["ports"] == [{"target": 8000, "published": 8003, "protocol": "tcp", "mode": "host"}]
    assert "ports" not in db  # a 127.0.0.1 database port has no swarm equivalent: not published
    assert any("db's port 9003 is not published" in note for note in result.notes)
    for service in stack["services"].values():
        deploy = service["deploy"]
        assert deploy["placement"] == {"constraints": ["node.id == node-a"]}
        assert deploy["endpoint_mode"] == "dnsrr" and deploy["replicas"] == 1
        assert deploy["update_config"] == {"order": "stop-first"}
        assert deploy["restart_policy"] == {"condition": "none"}  # compose's default "no"
        assert deploy["labels"] == {**LABEL, NODE_LABEL: "node-a"} and service["labels"] == LABEL
        assert deploy["resources"]["limits"] == {"cpus": "0.5", "memory": "536870912"}
    assert db["volumes"] == [{"type": "volume", "source": "db-data", "target": "/var/lib/postgresql/data"}]
    assert stack["networks"] == {"default": {"driver": "overlay", "labels": LABEL}}
    assert stack["volumes"] == {"db-data": {"labels": LABEL}}
    assert result.waves == [["db", "redis"], ["app"]]
    assert result.awaited == {"db": "running", "redis": "running"}
    assert list(result.subset(0)["services"]) == ["db", "redis"]


def test_a_former_node_is_kept_on_the_services() -> None:
    stack = plan_stack(copy.deepcopy(GENERATED), DEP, IMAGES, "node-b", ["node-a"]).document
    assert stack["services"]["db"]["deploy"]["labels"][FORMER_LABEL] == "node-a"


def test_what_a_swarm_cannot_honour_is_refused_all_at_once() -> None:
    with pytest.raises(StackRefused) as refused:
        plan(app={"volumes": [{"type": "bind", "source": "/w/conf/site.conf", "target": "/etc/site.conf",
                               "read_only": True}],
                  "security_opt": ["no-new-privileges"], "tmpfs": ["/run:size=64m"]},
             redis={"network_mode": "service:db", "ipc": "service:db"})
    problems = refused.value.problems
    assert "service app: bind mount of site.conf cannot be honoured on a Docker Swarm (the checkout is on the " \
           "manager only, the task runs on another node): COPY it into the image" in problems
    assert "service app: security_opt cannot be honoured on a Docker Swarm (docker stack deploy ignores it)" \
        in problems
    assert "service app: tmpfs options size=64m cannot be honoured on a Docker Swarm" in problems
    assert any(p.startswith("service redis: network_mode cannot be honoured") for p in problems)
    assert any(p.startswith("service redis: ipc cannot be honoured") for p in problems)


def test_an_image_in_the_service_s_registry_is_refused() -> None:
    """Another preview's pushed image is named `{SWARM_REGISTRY}/{its deployment id}/{service}:{tag}`: a compose
    file naming it would be mirrored by the manager, or pulled by a node, with the service's credentials."""
    document = copy.deepcopy(GENERATED)
    document["services"]["app"]["image"] = "10.0.0.1:5000/acme-web-3/app:0123456789ab"
    with pytest.raises(StackRefused) as refused:
        plan_stack(document, DEP, IMAGES, "node-a", registry_host="10.0.0.1:5000")
    assert refused.value.problems == ["service app: image 10.0.0.1:5000/acme-web-3/app:0123456789ab is in the "
                                      "service's registry (SWARM_REGISTRY), where only the service puts a "
                                      "preview's images"]
    document["services"]["app"]["image"] = "10.0.0.2:5000/acme-web-3/app:0123456789ab"  # another registry
    assert plan_stack(document, DEP, IMAGES, "node-a", registry_host="10.0.0.1:5000").document
    for spelt in ("localhost:5000", "[::1]:5000", "LOCALHOST:5000"):  # the same registry, named otherwise
        document["services"]["app"]["image"] = f"{spelt}/acme-web-3/app:0123456789ab"
        with pytest.raises(StackRefused):
            plan_stack(document, DEP, IMAGES, "node-a", registry_host="127.0.0.1:5000")
    document["services"]["app"]["image"] = "registry.example/acme-web-3/app:1"  # the default port, left out
    with pytest.raises(StackRefused):
        plan_stack(document, DEP, IMAGES, "node-a", registry_host="registry.example:443")


@pytest.mark.parametrize(("restart", "policy"), [
    ("always", {"condition": "any"}), ("unless-stopped", {"condition": "any"}),
    ("on-failure:3", {"condition": "on-failure", "max_attempts": 3}), ("on-failure", {"condition": "on-failure"}),
])
def test_restart_becomes_the_swarms_restart_policy(restart: str, policy: dict[str, Any]) -> None:
    assert plan(app={"restart": restart}).document["services"]["app"]["deploy"]["restart_policy"] == policy


def test_options_are_translated_not_dropped(tmp_path: Path) -> None:
    (tmp_path / "nginx.conf").write_text("worker_processes 1;\n")
    document = copy.deepcopy(GENERATED)
    document["configs"] = {"site": {"file": str(tmp_path / "nginx.conf")}}
    document["services"]["app"].update({"tmpfs": ["/tmp"], "extra_hosts": ["api.local=10.0.0.5"],
                                        "configs": [{"source": "site", "target": "/etc/nginx.conf"}],
                                        "pull_policy": "build"})
    document["services"]["redis"]["depends_on"] = {"migrate": {"condition": "service_completed_successfully"}}
    document["services"]["migrate"] = {"image": "redis:7", "command": ["true"]}
    result = plan_stack(document, DEP, {**IMAGES, "migrate": "reg/m:1"}, "node-a")
    app = result.document["services"]["app"]
    assert {"type": "tmpfs", "target": "/tmp"} in app["volumes"]
    assert app["extra_hosts"] == ["api.local:10.0.0.5"]
    site = result.document["configs"]["site"]
    assert site["file"].endswith("nginx.conf") and site["name"].startswith(f"{DEP}_site_")  # named by content
    assert any(note.startswith("pull_policy is an option of docker compose's client") for note in result.notes)
    assert result.waves == [["db", "migrate"], ["redis"], ["app"]]
    assert result.awaited["migrate"] == "complete"


def task(state: str, desired: str = "shutdown", error: str = "", ident: str = "t1", node: str = "w1") -> Task:
    return Task(ident, "app", node, desired, state, error)


@pytest.mark.parametrize(("tasks", "problem"), [
    ([task("running", "running")], None),
    ([task("failed", error="task: non-zero exit (3)")], "app exited with code 3"),
    ([task("starting", "running", ident="t2"), task("failed", error="task: non-zero exit (1)")],
     "app is restarting (exit code 1)"),
    ([task("rejected", error="No such image: reg/x:1")], "app could not start on w1: No such image: reg/x:1"),
    ([task("pending", "running", error="no suitable node (scheduling constraints not satisfied on 3 nodes)",
           node="")],
     "app cannot be placed: no suitable node (scheduling constraints not satisfied on 3 nodes) (pending)"),
    ([task("complete")], "app exited with code 0"),
])
def test_task_states_are_read_as_the_apps_problem(tasks: list[Task], problem: str | None) -> None:
    assert task_problem("app", tasks, set()) == problem


def test_a_failed_task_of_an_earlier_attempt_is_not_this_attempts_problem() -> None:
    assert task_problem("app", [task("failed", error="task: non-zero exit (3)")], {"t1"}) is None


class ScriptedTasks:
    """A SwarmCli whose `stack ps` answers one list of tasks after another (the last one from then on)."""

    def __init__(self, *answers: list[Task], down: str = "") -> None:
        self.answers = list(answers)
        self.asked = 0
        self.down = down

    def nodes(self) -> list[SwarmNode]:
        return [SwarmNode(name, name, False, "down" if name == self.down else "ready", "active", "10.0.0.1")
                for name in ("w1", "w2")]

    def task_nodes(self, task_ids: list[str]) -> dict[str, str]:  # node ids are their names here; "x" left
        return {task.id: task.node for answer in self.answers for task in answer if task.id in task_ids}

    def tasks(self, stack: str) -> list[Task]:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_an_update_is_awaited_until_no_task_of_before_runs() -> None:
    """stop-first: the old task still runs, then stops, then the new one starts; only then is it rolled out."""
    old = task("running", "running", ident="old")
    cli = ScriptedTasks([old], [task("running", "shutdown", ident="old")],
                        [task("shutdown", ident="old"), task("starting", "running", ident="new")],
                        [task("shutdown", ident="old"), task("running", "running", ident="new")])
    await_rollout(cli, DEP, ["app"], {"old"}, unlimited())  # type: ignore[arg-type]
    assert cli.asked == 4


def test_a_task_of_before_on_a_node_that_is_down_is_not_waited_for() -> None:
    """A down node's task keeps the state it had (running): the preview moved; its new task is what counts."""
    stale = Task("old", "app", "w2", "shutdown", "running", "")
    cli = ScriptedTasks([stale, task("running", "running", ident="new", node="w1")], down="w2")
    await_rollout(cli, DEP, ["app"], {"old"}, unlimited())  # type: ignore[arg-type]
    assert cli.asked == 1


def test_a_task_of_before_on_a_node_that_left_the_swarm_is_not_waited_for() -> None:
    """`docker node rm`: the node is no longer listed and `stack ps` names it by id; its task's state is stale."""
    stale = Task("old", "app", "x9q3node", "shutdown", "running", "")
    cli = ScriptedTasks([stale, task("running", "running", ident="new", node="w1")])
    await_rollout(cli, DEP, ["app"], {"old"}, unlimited())  # type: ignore[arg-type]
    assert cli.asked == 1


def test_an_update_whose_new_task_fails_fails_the_start() -> None:
    cli = ScriptedTasks([task("shutdown", ident="old"), task("failed", error="task: non-zero exit (2)", ident="new")])
    with pytest.raises(RuntimeFailure, match="Containers failed to start") as failure:
        await_rollout(cli, DEP, ["app"], {"old"}, unlimited())  # type: ignore[arg-type]
    assert failure.value.detail == "app exited with code 2"


def test_a_registry_collection_waits_for_pushes_and_later_pushes_wait_for_it() -> None:
    gate, order = PushGate(), []
    pushing, collect_waits = threading.Event(), threading.Event()

    def push(name: str, hold: threading.Event | None = None) -> None:
        with gate.pushing():
            order.append(f"{name} pushes")
            if hold is not None:
                pushing.set()
                hold.wait(5)

    def collect() -> None:
        collect_waits.set()
        with gate.collecting():
            order.append("collects")

    release = threading.Event()
    first = threading.Thread(target=push, args=("first", release))
    first.start()
    pushing.wait(5)
    collector = threading.Thread(target=collect)
    collector.start()
    collect_waits.wait(5)
    time.sleep(0.1)
    later = threading.Thread(target=push, args=("later",))
    later.start()
    time.sleep(0.1)
    assert order == ["first pushes"]  # the collection waits for the push; the later push for the collection
    release.set()
    for thread in (first, collector, later):
        thread.join(5)
    assert order == ["first pushes", "collects", "later pushes"]


def test_a_push_waiting_for_a_collection_can_be_stopped(tmp_path: Path) -> None:
    """A close (or a newer push, or the deadline) stops a deploy whose push waits for the collection."""
    gate, control = PushGate(), FlowControl(60)
    log = DeploymentLog(tmp_path / "log")
    with gate.collecting():
        threading.Timer(0.3, control.cancel, args=("closed",)).start()
        with pytest.raises(FlowAborted), gate.pushing(control, log):
            pass
    assert "waiting for the registry's garbage collection" in (tmp_path / "log").read_text()
    with gate.pushing(control=None):  # the collection done, pushes go on
        pass


def test_the_collection_is_due_an_interval_after_the_last_run_whatever_the_restarts(tmp_path: Path) -> None:
    assert due(tmp_path, 3600)  # never ran
    (tmp_path / GC_FILE).write_text(GcRun(at=datetime.now(UTC) - timedelta(minutes=30), ok=True,
                                          seconds=1.0).model_dump_json())
    assert not due(tmp_path, 3600) and due(tmp_path, 1800)


def test_registry_names_keep_the_deployment_a_whole_path_component() -> None:
    registry = Registry("reg.example:5000/previews", "https")
    assert registry.reference(DEP, "app", "abc") == f"reg.example:5000/previews/{DEP}/app:abc"
    assert registry.repository_prefix(DEP) == f"reg.example:5000/previews/{DEP}/"
    assert Registry.owner(f"previews/{DEP}/db", registry.namespace) == DEP
    # What a preview does not build is shared, under a name no deployment id can have (they end with a number).
    assert registry.mirror_reference("postgres:16", "b973") == "reg.example:5000/previews/mirror/postgres:b973"
    assert registry.mirror_reference("localhost:5000/team/db:2@sha256:ab", "c1") == \
        "reg.example:5000/previews/mirror/localhost-5000/team/db:c1"


def test_swarm_settings_are_the_runtime_s_own(make_settings: SettingsFactory,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """SWARM_* are read by the swarm runtime (orchestrator/runtime/swarm/settings.py), not the core settings: a bad
    one stops start-up only where RUNTIME=swarm, and doctor names it."""
    from orchestrator.cli.doctor import _runtime_checks
    from orchestrator.rendering.plugin_host import build_plugin_host
    from orchestrator.runtime.swarm.settings import SwarmSettings

    def own(**env: str) -> SwarmSettings:
        for name in ("SWARM_REGISTRY", "SWARM_NODE_ENGINES", "SWARM_REGISTRY_USER", "SWARM_REGISTRY_PASSWORD",
                     "SWARM_REGISTRY_GC_COMMAND"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return read_own_settings(SwarmSettings, _env_file=None)

    with pytest.raises(SettingsError, match="SWARM_REGISTRY is not valid: must be set when RUNTIME=swarm"):
        own()
    settings = own(SWARM_REGISTRY="10.0.0.1:5000", SWARM_NODE_ENGINES="worker1=ssh://root@w1, worker2=unix:///run/w2.sock")
    assert settings.node_engines == {"worker1": "ssh://root@w1", "worker2": "unix:///run/w2.sock"}
    assert settings.registry_credentials is None and settings.secret_values() == []
    with pytest.raises(SettingsError, match="SWARM_NODE_ENGINES is not valid"):
        own(SWARM_REGISTRY="10.0.0.1:5000", SWARM_NODE_ENGINES="worker1=/run/w1.sock")
    with pytest.raises(SettingsError, match="SWARM_REGISTRY_GC_COMMAND is not valid"):
        own(SWARM_REGISTRY="10.0.0.1:5000", SWARM_REGISTRY_GC_COMMAND="docker-registry garbage-collect 'unclosed")
    for half in ({"SWARM_REGISTRY_USER": "po-service"}, {"SWARM_REGISTRY_PASSWORD": "s3cret-value"}):
        with pytest.raises(SettingsError, match="SWARM_REGISTRY_USER and SWARM_REGISTRY_PASSWORD are set together"):
            own(SWARM_REGISTRY="10.0.0.1:5000", **half)
    both = own(SWARM_REGISTRY="10.0.0.1:5000", SWARM_REGISTRY_USER="po-service", SWARM_REGISTRY_PASSWORD="s3cret-value")
    assert both.registry_credentials == ("po-service", "s3cret-value") and both.secret_values() == ["s3cret-value"]

    # The core settings know none of them: a compose service starts whatever SWARM_* says.
    monkeypatch.delenv("SWARM_REGISTRY")
    monkeypatch.setenv("SWARM_NODE_ENGINES", "worker1=/run/w1.sock")
    assert not hasattr(make_settings(), "swarm_registry")
    [line] = _runtime_checks(make_settings(runtime="swarm"), build_plugin_host(load_entry_points=False))
    assert line.hard and not line.ok and line.name == "the runtime (RUNTIME=swarm)'s settings"
    assert "SWARM_REGISTRY is not valid" in line.detail and "SWARM_NODE_ENGINES is not valid" in line.detail


def test_doctor_shows_the_runtimes_own_lines(make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime brings its own doctor lines (`checks()`); doctor has no case of its own for any runtime. Here the
    swarm's, against an engine that is no swarm manager (a socket nobody serves)."""
    from orchestrator.cli.doctor import _runtime_checks
    from orchestrator.rendering.plugin_host import build_plugin_host

    class Flux(Runtime):
        name = "flux"

        def checks(self) -> list[Check]:
            return [Check("the flux capacitor", False, "cold", "warm it")]

    assert Runtime().checks() == []
    assert [check.line() for check in Flux().checks()] == ["✗ the flux capacitor: cold — fix: warm it"]
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("SWARM_REGISTRY", "127.0.0.1:9")
    monkeypatch.setenv("SWARM_REGISTRY_SCHEME", "http")
    plugins = build_plugin_host(load_entry_points=False)
    checks = _runtime_checks(make_settings(runtime="swarm"), plugins)
    names = [check.name for check in checks]
    assert names[0] == "this Docker engine is a swarm manager (RUNTIME=swarm)" and checks[0].hard
    assert not checks[0].ok and "registry garbage collection (SWARM_REGISTRY_GC_COMMAND)" in names
    [unknown] = _runtime_checks(make_settings(runtime="nosuch"), plugins)
    assert unknown.hard and not unknown.ok and "RUNTIME 'nosuch' is not provided" in unknown.detail


def test_a_runtime_without_app_address_is_proxied_on_this_host() -> None:
    class Plain(Runtime):
        name = "plain"

    class Remote(Runtime):
        name = "remote"

        def app_address(self, deployment_id: str, app_port: int) -> tuple[str, int]:
            return "10.1.0.12", app_port

    assert Plain().app_address(DEP, 8003) == ("127.0.0.1", 8003)
    assert Plain().app_address_before_start(8003) == ("127.0.0.1", 8003)
    assert Remote().app_address(DEP, 8003) == ("10.1.0.12", 8003)
    # a runtime with its own address is not taken for the loopback before it started: its route waits for it
    assert Remote().app_address_before_start(8003) is None


def test_the_route_proxies_to_the_host_the_runtime_names(tmp_path: Path) -> None:
    from orchestrator.adapters.nginx import Proxy
    from orchestrator.common.host_env import HostEnv

    proxy = Proxy(tmp_path, "true", "true", HostEnv.for_state_dir(tmp_path))
    assert "proxy_pass http://127.0.0.1:8003/;" in proxy.route("acme-api", 3, DEP, 8003, subject=subject_of(DEP))
    proxy.install("acme-api", 3, DEP, 8003, None, host="10.1.0.12", subject=subject_of(DEP))
    assert "proxy_pass http://10.1.0.12:8003/;" in proxy.path("acme-api", 3).read_text()


def test_a_swarm_route_hands_the_update_gap_to_the_service(tmp_path: Path) -> None:
    """Stop-first updates leave a moment when nothing answers on the app's port: the route sends nginx's 502/504
    to the service (which says "being updated" while the deploy runs); nothing is logged for sleep, which a
    swarm preview never does."""
    from orchestrator.adapters.nginx import Proxy, Routing
    from orchestrator.common.host_env import HostEnv
    from orchestrator.runtime.swarm import SwarmRuntime

    assert SwarmRuntime.updates_leave_gap and not Runtime.updates_leave_gap
    routing = Routing(hand_off=True, wake_key=tmp_path / "wake.key")
    route = Proxy(tmp_path, "true", "true", HostEnv.for_state_dir(tmp_path), routing=routing).route(
        "acme-api", 3, DEP, 8003, "10.1.0.12", subject=subject_of(DEP))
    assert f"error_page 502 504 = @preview-wake-{DEP};" in route
    assert f"rewrite ^ /api/preview-wake/{DEP}? break;" in route
    assert "access_log" not in route
    plain = Proxy(tmp_path, "true", "true", HostEnv.for_state_dir(tmp_path)).route("acme-api", 3, DEP, 8003,
                                                                                  subject=subject_of(DEP))
    assert "error_page 502" not in plain and "preview-wake" not in plain
