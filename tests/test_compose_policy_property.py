"""A property of the compose-file policy, over files generated from the compose specification's own fields:
whatever the service accepts, the file it writes — read back by the real `docker compose config`, in the form
compose runs — stays inside what a preview may do. The oracle below is written on its own, from the rules in
docs/security.md, not from the policy's code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from orchestrator.common.host_env import HostEnv
from orchestrator.plugin_api.preview_config import ConfigError, parse_preview_config
from orchestrator.rendering.compose_allowlist import ALLOWED_ULIMITS
from orchestrator.rendering.compose_document import LOG_OPTIONS, PIDS_LIMIT
from orchestrator.rendering.compose_file import RESOURCES, make_context, render_deployment, write_rendered
from orchestrator.rendering.plugin_host import build_plugin_host
from orchestrator.runtime.compose_cli import Compose
from tests.support.compose import compose_binary
from tests.support.repos import config_for

HOST = build_plugin_host(load_entry_points=False)
BUDGET = settings(max_examples=120, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PROJECT = "acme-shop-7"

# Every service field of the compose specification (schema/compose-spec.json, `service.properties`).
SPEC_SERVICE_FIELDS = (
    "annotations", "attach", "blkio_config", "build", "cap_add", "cap_drop", "cgroup", "cgroup_parent", "command",
    "configs", "container_name", "cpu_count", "cpu_percent", "cpu_period", "cpu_quota", "cpu_rt_period",
    "cpu_rt_runtime", "cpu_shares", "cpus", "cpuset", "credential_spec", "depends_on", "deploy", "develop",
    "device_cgroup_rules", "devices", "dns", "dns_opt", "dns_search", "domainname", "entrypoint", "env_file",
    "environment", "expose", "extends", "external_links", "extra_hosts", "gpus", "group_add", "healthcheck",
    "hostname", "image", "init", "ipc", "isolation", "label_file", "labels", "links", "logging", "mac_address",
    "mem_limit", "mem_reservation", "mem_swappiness", "memswap_limit", "models", "network_mode", "networks",
    "oom_kill_disable", "oom_score_adj", "pid", "pids_limit", "platform", "ports", "post_start", "pre_stop",
    "privileged", "profiles", "provider", "pull_policy", "pull_refresh_after", "read_only", "restart", "runtime",
    "scale", "secrets", "security_opt", "shm_size", "stdin_open", "stop_grace_period", "stop_signal",
    "storage_opt", "sysctls", "tmpfs", "tty", "ulimits", "use_api_socket", "user", "userns_mode", "uts",
    "volumes", "volumes_from", "working_dir",
)
BUILD_FIELDS = ("additional_contexts", "args", "cache_from", "cache_to", "context", "dockerfile",
                "dockerfile_inline", "entitlements", "extra_hosts", "isolation", "labels", "network", "no_cache",
                "platforms", "privileged", "provenance", "pull", "sbom", "secrets", "shm_size", "ssh", "tags",
                "target", "ulimits")

# Values an author would write, benign and hostile, with compose's interpolation and defaults in the mix.
PATHS = ["./src", ".", "./data", "/", "/etc", "../..", "${R:-/}", "${R:-./src}", "$HOME", "~/x", "./link-out",
         "/var/run/docker.sock", "${S:-/var/run/docker.sock}"]
MODES = ["host", "${M:-host}", "private", "service:db", "container:other", "none", "${M:-}", "bridge"]
SCALARS = st.sampled_from(["x", "1", "true", "${X:-host}", "${X:-/}", "host", "0.0.0.0:80:80", "1g", "SYS_ADMIN"])


def volume_entries() -> st.SearchStrategy[Any]:
    short = st.builds(lambda source, mode: f"{source}:/mnt{mode}", st.sampled_from([*PATHS, "data", "vol"]),
                      st.sampled_from(["", ":ro", ":rw", ":ro,z"]))
    long = st.fixed_dictionaries(
        {"type": st.sampled_from(["bind", "volume", "tmpfs", "npipe", "image"]), "target": st.just("/mnt")},
        optional={"source": st.sampled_from([*PATHS, "data"]), "read_only": st.booleans(),
                  "bind": st.fixed_dictionaries({}, optional={"propagation": st.sampled_from(["rshared",
                                                                                               "private"])})},
    )
    return st.lists(short | long, max_size=3)


def field_value(name: str) -> st.SearchStrategy[Any]:
    if name == "volumes":
        return volume_entries()
    if name in ("pid", "ipc", "network_mode", "uts", "userns_mode", "cgroup"):
        return st.sampled_from(MODES)
    if name == "build":
        typed = {"context": st.sampled_from(PATHS), "dockerfile": st.sampled_from(["Dockerfile", "../../x"]),
                 "network": st.sampled_from(["host", "${N:-host}", "default", "none"]),
                 "ssh": st.just(["default"]), "privileged": st.booleans(), "tags": st.just(["postgres:16"]),
                 "args": st.just({"A": "${X:-1}"}), "target": st.just("build"),
                 "additional_contexts": st.just({"up": "../.."}), "cache_from": st.just(["type=local,src=/"]),
                 "secrets": st.just(["s"]), "entitlements": st.just(["network.host"])}
        chosen = st.lists(st.sampled_from(list(typed)), max_size=3, unique=True)
        return st.sampled_from(PATHS) | chosen.flatmap(
            lambda keys: st.fixed_dictionaries({key: typed[key] for key in keys})).map(
            lambda d: {**d, "context": d.get("context", ".")})
    if name in ("scale",):
        return st.integers(min_value=0, max_value=4)
    if name == "pids_limit":
        return st.sampled_from([-1, 0, 100, 1024, 4096, "${P:--1}"])
    if name == "ulimits":
        amounts = st.sampled_from([0, 1024, 65536, 99, -1, 10**9])
        return st.dictionaries(st.sampled_from(["nofile", "rtprio", "nice", "memlock", "core", "stack", "rttime"]),
                               amounts | st.fixed_dictionaries({"soft": amounts, "hard": amounts}), max_size=2)
    if name == "logging":
        return st.fixed_dictionaries({"driver": st.sampled_from(["json-file", "local", "syslog", "none"])},
                                     optional={"options": st.just({"max-size": "10g", "max-file": "1000"})})
    if name == "image":
        return st.sampled_from(["redis", "po-standin/python:test", "${I:-postgres:16}", "po-build/0a1b-app",
                                "${I:-po-build/0a1b-app}"])
    if name == "ports":
        return st.lists(st.sampled_from(["80", "0.0.0.0:80:80", "127.0.0.1:9999:5432", "${P:-22}:22"]),
                        max_size=2)
    if name == "container_name":
        return st.sampled_from(["other-app", "${C:-codertocat-hello-world-pr-2-db}"])
    if name == "deploy":
        return st.fixed_dictionaries({}, optional={"replicas": st.integers(0, 4),
                                                   "resources": st.just({"limits": {"cpus": "8"}}),
                                                   "placement": st.just({"constraints": ["node.role==manager"]})})
    if name in ("privileged", "read_only", "init", "tty", "stdin_open", "oom_kill_disable", "use_api_socket"):
        return st.booleans()
    if name in ("env_file", "label_file"):
        return st.lists(st.sampled_from(["./app.env", "${E:-/etc/hostname}", "/etc/hostname", "./link-out"]),
                        max_size=2)
    if name in ("cap_add", "cap_drop", "devices", "dns", "security_opt", "volumes_from", "external_links",
                "group_add", "tmpfs", "profiles", "expose"):
        return st.lists(SCALARS, max_size=2)
    if name in ("environment", "labels", "sysctls", "annotations"):
        return st.dictionaries(st.sampled_from(["A", "B", "net.ipv4.ip_forward"]), SCALARS, max_size=2)
    return SCALARS


# Mostly the options that decide where a container reaches, sometimes any field of the specification.
REACHING = ("volumes", "pid", "ipc", "network_mode", "build", "deploy", "scale", "ports", "env_file", "image",
            "security_opt", "tmpfs", "read_only", "environment", "labels", "container_name")
fields = st.one_of(st.sampled_from(REACHING), st.sampled_from(REACHING), st.sampled_from(SPEC_SERVICE_FIELDS))
service = st.tuples(
    st.sampled_from([{"build": "."}, {"image": "redis"}]),
    st.lists(fields, max_size=3, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({name: field_value(name) for name in chosen})),
).map(lambda parts: {**parts[0], **parts[1]})
top_level = st.fixed_dictionaries({}, optional={
    "volumes": st.just({"data": {}}) | st.just({"data": {"name": "someone-else_db-data"}})
    | st.just({"data": {"external": True}}) | st.just({"data": {"driver_opts": {"device": "/", "o": "bind"}}}),
    "networks": st.just({"default": {"name": "${N:-other_default}"}}) | st.just({"default": {"external": True}})
    | st.just({"default": {}}),
})


def write_repository(root: Path, document: dict[str, Any]) -> Path:
    if root.exists():
        shutil.rmtree(root)
    (root / "src").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "app.env").write_text("A=1\n")
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / "preview-config.yml").write_text(yaml.safe_dump(config_for("python")))
    (root / "compose.preview.yml").write_text(yaml.safe_dump(document))
    return root


def compose_runs(work: Path, file_name: str) -> dict[str, Any]:
    """The written file as compose itself reads it when the service runs it."""
    result = subprocess.run([compose_binary(), "--project-name", PROJECT, "--file", file_name, "config", "--format",
                             "json"], cwd=work, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def inside(root: Path, path: str) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


def violations(document: dict[str, Any], root: Path) -> list[str]:
    """The oracle: what a preview may never end up doing, whatever the policy's own code says."""
    found = []
    for kind in ("networks", "volumes"):
        for key, definition in (document.get(kind) or {}).items():
            definition = definition or {}
            if definition.get("external") or definition.get("driver_opts"):
                found.append(f"{kind} {key} reaches outside")
            if definition.get("name", f"{PROJECT}_{key}") != f"{PROJECT}_{key}":
                found.append(f"{kind} {key} is named {definition['name']}")
    for name, svc in document["services"].items():
        for option in ("privileged", "cap_add", "devices", "sysctls", "volumes_from", "cgroup_parent", "runtime",
                       "userns_mode", "uts", "cgroup", "group_add", "external_links", "use_api_socket", "provider"):
            if svc.get(option):
                found.append(f"{name}: {option}")
        for option in ("pid", "ipc", "network_mode"):
            value = str(svc.get(option) or "")
            if value == "host" or value.startswith("container:"):
                found.append(f"{name}: {option} {value}")
        for opt in svc.get("security_opt") or []:
            if "no-new-privileges" not in opt:
                found.append(f"{name}: security_opt {opt}")
        resources = (svc.get("deploy") or {}).get("resources") or {}
        limits = dict(resources.get("limits") or {})
        pids = limits.pop("pids", None)
        if {**resources, "limits": limits} != json.loads(json.dumps(_bytes(RESOURCES))):
            found.append(f"{name}: limits {resources}")
        if not isinstance(pids, int) or not 0 < pids <= PIDS_LIMIT or "pids_limit" in svc:
            found.append(f"{name}: pids {pids} (pids_limit {svc.get('pids_limit')})")
        logging = svc.get("logging") or {}
        if logging.get("driver") not in ("json-file", "local") or logging.get("options") != LOG_OPTIONS:
            found.append(f"{name}: logging {logging}")
        if "NET_RAW" not in (svc.get("cap_drop") or []) and "ALL" not in (svc.get("cap_drop") or []):
            found.append(f"{name}: raw sockets")
        for limit, value in (svc.get("ulimits") or {}).items():
            values = [value.get("soft"), value.get("hard")] if isinstance(value, dict) else [value]
            if limit not in ALLOWED_ULIMITS or any(v > ALLOWED_ULIMITS[limit] for v in values):
                found.append(f"{name}: ulimits {limit} {value}")
        if svc.get("scale", 1) > 1 or (svc.get("deploy") or {}).get("replicas", 1) > 1:
            found.append(f"{name}: more than one container")
        for volume in svc.get("volumes") or []:
            source = str(volume.get("source") or "")
            if "docker.sock" in source:
                found.append(f"{name}: the Docker socket")
            if volume["type"] == "bind" and (not inside(root, source) or not volume.get("read_only")):
                found.append(f"{name}: bind {source} rw={not volume.get('read_only')}")
            if volume["type"] not in ("bind", "volume", "tmpfs"):
                found.append(f"{name}: mount type {volume['type']}")
        build = svc.get("build")
        if build is not None:
            if not inside(root, build["context"]) or set(build) & {"ssh", "secrets", "privileged",
                                                                    "additional_contexts", "entitlements", "tags"}:
                found.append(f"{name}: build {build}")
            if build.get("network") not in (None, "default", "none"):
                found.append(f"{name}: build network {build['network']}")
            if not str(svc.get("image") or "").startswith("po-build/"):  # only the service's keyed name
                found.append(f"{name}: image {svc.get('image')} beside build")
            if (build.get("labels") or {}).get("dev.preview-orchestrator.deployment") != PROJECT:
                found.append(f"{name}: built image without the deployment's label")
        elif "po-build/" in str(svc.get("image") or ""):
            found.append(f"{name}: runs a built image of the service: {svc['image']}")
        if svc.get("ports") and name not in ("app", "db"):
            found.append(f"{name}: ports")
        for port in svc.get("ports") or []:
            if port.get("host_ip") != "127.0.0.1":
                found.append(f"{name}: port on {port.get('host_ip')}")
    return found


def _bytes(resources: dict[str, Any]) -> dict[str, Any]:
    """RESOURCES as compose prints it (memory in bytes, cpus as a number)."""
    sizes = {"512M": 536870912, "256M": 268435456}
    return {kind: {"cpus": float(values["cpus"]), "memory": str(sizes[values["memory"]])}
            for kind, values in resources.items()}


@seed(20261123)
@BUDGET
@given(st.dictionaries(st.sampled_from(["app", "db", "side"]), service, min_size=1, max_size=3), top_level)
def test_whatever_the_policy_accepts_compose_runs_inside_the_allow_list(tmp_path: Path, services: dict,
                                                                        top: dict) -> None:
    services.setdefault("app", {"build": "."})
    root = write_repository(tmp_path / "repo", {"services": services, **top})
    (root / "link-out").symlink_to("/etc")  # links leaving the checkout are refused before rendering in a deploy;
    # here the policy alone must still resolve them
    config = parse_preview_config(config_for("python"), HOST.known_names())
    context = make_context("acme", "shop", 7, 8007, 9007, b"k", {})
    normalize = Compose(60, HostEnv.for_state_dir(tmp_path)).normalized
    try:
        rendered = render_deployment(HOST, root, config, context, normalize)
    except ConfigError:
        event("refused")
        return  # refused with a message: nothing runs
    event("accepted")
    written = write_rendered(root, rendered)
    assert violations(compose_runs(root, written.name), root) == []


def test_the_property_has_accepted_and_refused_cases(tmp_path: Path) -> None:
    """The generator is not vacuous: a plain file passes and a hostile one is caught by the oracle when the
    policy is bypassed."""
    benign = {"services": {"app": {"build": ".", "volumes": ["./src:/src:ro", "data:/d"]}},
              "volumes": {"data": {}}}
    root = write_repository(tmp_path / "repo", benign)
    config = parse_preview_config(config_for("python"), HOST.known_names())
    context = make_context("acme", "shop", 7, 8007, 9007, b"k", {})
    rendered = render_deployment(HOST, root, config, context, Compose(60, HostEnv.for_state_dir(tmp_path)).normalized)
    assert violations(compose_runs(root, write_rendered(root, rendered).name), root) == []
    hostile = {"services": {"app": {"build": ".", "pid": "${P:-host}", "volumes": ["${R:-/}:/host"]}}}
    write_repository(root, hostile)
    raw = compose_runs(root, "compose.preview.yml")
    assert {"app: pid host", "app: bind / rw=True"} <= set(violations(raw, root))
