"""The rendered compose file, as `docker stack deploy` can run it on a Docker Swarm.

The input is compose's own reading of the file (`docker compose config`: interpolated, long syntax, `$$` kept
escaped, which `docker stack deploy` unescapes). The output is a version 3.9 stack file in which:

- every service runs the image pushed to the registry (`build` is gone: the image was built on the manager);
- every service is pinned to the preview's node (its named volumes live there), updates stop the old task
  first (a host-mode port cannot be held twice), and is reached by name (`endpoint_mode: dnsrr`: this kind of
  swarm may have no IPVS, so no virtual IPs);
- the app's port is published in `mode: host` on that node (the ingress routing mesh needs IPVS too);
- `restart` becomes `deploy.restart_policy`, `tmpfs` becomes tmpfs mounts, networks become overlay networks,
  configs and secrets get a content-derived name (swarm objects cannot change);
- `depends_on` is replaced by start waves: a service starts once the services it waits for are running (a task
  with a health check is running only once healthy) or have completed.

What a swarm cannot honour (a bind mount of the checkout, which is on the manager only; security_opt, which
`docker stack deploy` ignores; ...) is refused with the service and the option, never dropped silently.
Options that only steer compose's own client (pull_policy, develop, ...) are dropped with a note.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from orchestrator.plugin_api import DEPLOYMENT_LABEL
from orchestrator.runtime.swarm.registry import same_registry
from orchestrator.runtime.swarm.waves import StackPlan, start_waves

STACK_VERSION = "3.9"
APP = "app"
NODE_LABEL = "dev.preview-orchestrator.node"  # the node a preview is pinned to (a service label)
FORMER_LABEL = "dev.preview-orchestrator.former-nodes"  # nodes it was pinned to before (their volumes may stay)

# Service options copied as they are: `docker stack deploy` applies them to the task's container.
COPIED = frozenset({"command", "entrypoint", "environment", "labels", "user", "working_dir", "hostname",
                    "stop_grace_period", "stop_signal", "ulimits", "read_only", "tty", "stdin_open", "init",
                    "dns", "dns_search", "cap_drop", "expose", "logging", "configs", "secrets"})
# Handled below (translated, or replaced by what the swarm does instead).
HANDLED = frozenset({"image", "build", "container_name", "restart", "depends_on", "ports", "volumes", "tmpfs",
                     "networks", "deploy", "healthcheck", "extra_hosts", "scale", "links"})
# Options of compose's own client: they change nothing in a running service.
CLIENT_ONLY = frozenset({"pull_policy", "pull_refresh_after", "develop", "attach", "profiles"})
NO_EQUIVALENT = {
    "security_opt": "docker stack deploy ignores it",
    "shm_size": "docker stack deploy ignores it",
    "ipc": "swarm services share no namespaces",
    "pid": "swarm services share no namespaces",
    "network_mode": "swarm services always join the stack's networks",
    "post_start": "a compose lifecycle hook",
    "pre_stop": "a compose lifecycle hook",
}
HEALTHCHECK = frozenset({"test", "interval", "timeout", "retries", "start_period", "disable"})
DEPLOY_KEPT = frozenset({"resources", "restart_policy", "labels", "rollback_config", "update_config"})


class StackRefused(Exception):
    """The compose file asks for what a swarm cannot do; one sentence per option."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def plan_stack(compose: dict[str, Any], deployment_id: str, images: dict[str, str], node_id: str,
               former: list[str] | None = None, registry_host: str = "") -> StackPlan:
    """The stack file for `compose` (normalised), with `images` (service -> pushed reference) pinned to
    `node_id` (`former`: the nodes it was pinned to before). Raises StackRefused with every problem at once. An
    `image:` in SWARM_REGISTRY (`registry_host`) is another preview's: the nodes would pull it with our credentials."""
    problems: list[str] = []
    notes: list[str] = []
    label = {DEPLOYMENT_LABEL: deployment_id}
    services: dict[str, Any] = {}
    for name, service in (compose.get("services") or {}).items():
        if registry_host and same_registry(str((service or {}).get("image") or "").split("/", 1)[0], registry_host):
            image = str(service["image"])
            problems.append(f"service {name}: image {image[:120]} is in the service's registry (SWARM_REGISTRY), "
                            "where only the service puts a preview's images")
        pin = {NODE_LABEL: node_id, **({FORMER_LABEL: ",".join(former)} if former else {})}
        services[name] = _service(str(name), service, images, pin, label, problems, notes)
    document: dict[str, Any] = {"version": STACK_VERSION, "services": services}
    networks = {key: _network(key, value or {}, label, problems)
                for key, value in (compose.get("networks") or {}).items()}
    document["networks"] = networks or {"default": {"driver": "overlay", "labels": label}}
    volumes = {key: {"labels": {**(value or {}).get("labels", {}), **label}}
               for key, value in (compose.get("volumes") or {}).items()}
    if volumes:
        document["volumes"] = volumes
    for kind in ("configs", "secrets"):
        objects = {key: _file_object(kind, str(key), value or {}, deployment_id, label, problems)
                   for key, value in (compose.get(kind) or {}).items()}
        if objects:
            document[kind] = objects
    if problems:
        raise StackRefused(problems)
    waves, awaited = start_waves(compose.get("services") or {})
    return StackPlan(document, waves, awaited, sorted(set(notes)))


def _service(name: str, service: dict[str, Any], images: dict[str, str], pin: dict[str, str],
             label: dict[str, str], problems: list[str], notes: list[str]) -> dict[str, Any]:
    where = f"service {name}"
    out: dict[str, Any] = {"image": images[name]} if name in images else {}
    if not out:
        problems.append(f"{where}: no image was pushed for it")
    for key, value in service.items():
        if value is None or key.startswith("x-") or key in HANDLED:
            continue
        if key in COPIED:
            out[key] = value
        elif key in CLIENT_ONLY:
            notes.append(f"{key} is an option of docker compose's client; a swarm service has no use for it")
        elif value not in (False, "", [], {}):
            why = NO_EQUIVALENT.get(key, "docker stack deploy has no equivalent")
            problems.append(f"{where}: {key} cannot be honoured on a Docker Swarm ({why})")
    if isinstance(out.get("environment"), dict):  # an unset variable: compose passes nothing, nor do we
        out["environment"] = {k: v for k, v in out["environment"].items() if v is not None}
    out["labels"] = {**(service.get("labels") or {}), **label}
    if service.get("container_name"):
        notes.append("container_name is not used: a swarm names containers after the stack and service")
    for link in service.get("links") or []:
        target, _, alias = str(link).partition(":")
        if alias and alias != target:
            problems.append(f"{where}: links alias {alias} cannot be honoured (reach the service by its name)")
    if service.get("healthcheck"):
        check = service["healthcheck"]
        problems += [f"{where}: healthcheck {key} cannot be honoured on a Docker Swarm" for key in check
                     if key not in HEALTHCHECK and check[key] is not None]
        out["healthcheck"] = {key: value for key, value in check.items() if key in HEALTHCHECK and value is not None}
    if service.get("extra_hosts"):
        out["extra_hosts"] = _hosts(service["extra_hosts"])
    ports = _ports(name, service.get("ports") or [], problems, notes)
    if ports:
        out["ports"] = ports
    mounts = _mounts(where, service, problems)
    if mounts:
        out["volumes"] = mounts
    out["networks"] = _service_networks(where, service.get("networks") or {"default": None}, problems)
    out["deploy"] = _deploy(where, service, pin, label, problems)
    return out


def _deploy(where: str, service: dict[str, Any], pin: dict[str, str], label: dict[str, str],
            problems: list[str]) -> dict[str, Any]:
    given = service.get("deploy") or {}
    deploy = {key: value for key, value in given.items() if key in DEPLOY_KEPT and value not in (None, {})}
    resources = deploy.get("resources") or {}
    for part in ("limits", "reservations"):
        if part in resources:  # the stack schema wants strings; compose config gives numbers and byte counts
            resources[part] = {key: str(value) for key, value in resources[part].items() if value is not None}
    if "pids" in resources.get("limits", {}):  # compose config gives a number; the stack schema an integer
        resources["limits"]["pids"] = int(resources["limits"]["pids"])
    deploy["mode"] = "replicated"
    deploy["replicas"] = 1
    deploy["endpoint_mode"] = "dnsrr"
    deploy["labels"] = {**(given.get("labels") or {}), **label, **pin}
    deploy["placement"] = {"constraints": [f"node.id == {pin[NODE_LABEL]}"]}
    deploy["update_config"] = {**(given.get("update_config") or {}), "order": "stop-first"}
    if "restart_policy" not in deploy:
        deploy["restart_policy"] = _restart_policy(where, service.get("restart"), problems)
    return deploy


def _restart_policy(where: str, restart: Any, problems: list[str]) -> dict[str, Any]:
    """compose's `restart` (default "no") as the swarm's restart policy (default "any")."""
    policy = str(restart or "no")
    if policy == "no":
        return {"condition": "none"}
    if policy in ("always", "unless-stopped"):
        return {"condition": "any"}
    if policy.startswith("on-failure"):
        attempts = policy.partition(":")[2]
        return {"condition": "on-failure", **({"max_attempts": int(attempts)} if attempts.isdigit() else {})}
    problems.append(f"{where}: restart {policy[:40]} cannot be honoured on a Docker Swarm")
    return {"condition": "none"}


def _ports(name: str, ports: list[Any], problems: list[str], notes: list[str]) -> list[dict[str, Any]]:
    """The app's port in host mode on its node; a database port bound to 127.0.0.1 is not published at all
    (a swarm cannot bind a node's loopback: it would listen on every address of the node)."""
    published: list[dict[str, Any]] = []
    for port in ports:
        if not isinstance(port, dict) or not port.get("published"):
            continue
        if name == APP:
            published.append({"target": int(port["target"]), "published": int(str(port["published"])),
                              "protocol": port.get("protocol") or "tcp", "mode": "host"})
        elif port.get("host_ip") in ("127.0.0.1", "::1"):
            notes.append(f"{name}'s port {port['published']} is not published: on a swarm it would listen on "
                         "every address of its node, not on 127.0.0.1 (use docker exec on the node instead)")
        else:
            problems.append(f"service {name}: ports cannot be published on a Docker Swarm (only the app's)")
    return published


def _mounts(where: str, service: dict[str, Any], problems: list[str]) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = []
    for volume in service.get("volumes") or []:
        kind = volume.get("type")
        if kind == "volume":
            mount = {key: volume[key] for key in ("type", "source", "target", "read_only") if key in volume}
            if (volume.get("volume") or {}).get("nocopy"):
                mount["volume"] = {"nocopy": True}
            mounts.append(mount)
        elif kind == "tmpfs":
            mounts.append({"type": "tmpfs", "target": volume["target"],
                           **({"tmpfs": volume["tmpfs"]} if volume.get("tmpfs") else {})})
        else:
            source = Path(str(volume.get("source", ""))).name or "a path"
            problems.append(f"{where}: {kind} mount of {source} cannot be honoured on a Docker Swarm (the checkout "
                            "is on the manager only, the task runs on another node): COPY it into the image")
    for entry in service.get("tmpfs") or []:
        target, _, options = str(entry).partition(":")
        if options:
            problems.append(f"{where}: tmpfs options {options[:40]} cannot be honoured on a Docker Swarm")
        mounts.append({"type": "tmpfs", "target": target})
    return mounts


def _service_networks(where: str, networks: Any, problems: list[str]) -> dict[str, Any]:
    if isinstance(networks, list):
        return {str(name): None for name in networks}
    out: dict[str, Any] = {}
    for name, settings in networks.items():
        settings = settings or {}
        extra = [key for key, value in settings.items() if key != "aliases" and value not in (None, [], {}, 0)]
        if extra:
            problems.append(f"{where}: networks {name} {', '.join(extra)} cannot be honoured on a Docker Swarm")
        out[str(name)] = {"aliases": settings["aliases"]} if settings.get("aliases") else None
    return out


def _network(key: str, network: dict[str, Any], label: dict[str, str], problems: list[str]) -> dict[str, Any]:
    """Every network of a preview is an overlay network: its services may run on any node."""
    if network.get("enable_ipv6"):
        problems.append(f"networks {key}: enable_ipv6 cannot be honoured on a Docker Swarm")
    out: dict[str, Any] = {"driver": "overlay", "labels": {**(network.get("labels") or {}), **label}}
    if network.get("internal"):
        out["internal"] = True
    return out


def _file_object(kind: str, key: str, value: dict[str, Any], deployment_id: str, label: dict[str, str],
                 problems: list[str]) -> dict[str, Any]:
    """A config or secret from a file of the checkout, named after its content: a swarm object cannot change,
    so a changed file must become a new object."""
    path = value.get("file")
    if not path:
        problems.append(f"{kind} {key}: only a file of the repository can be a {kind[:-1]} on a Docker Swarm")
        return {}
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    except OSError as exc:
        problems.append(f"{kind} {key}: {Path(path).name} cannot be read ({exc.strerror})")
        return {}
    return {"file": path, "name": f"{deployment_id}_{key}_{digest}", "labels": {**(value.get("labels") or {}),
                                                                               **label}}


def _hosts(value: Any) -> list[str]:
    """extra_hosts as `host:address` (compose config may give a mapping, or `host=address`)."""
    if isinstance(value, dict):
        return [f"{host}:{address}" for host, addresses in value.items()
                for address in (addresses if isinstance(addresses, list) else [addresses])]
    return [str(entry).replace("=", ":", 1) if "=" in str(entry) else str(entry) for entry in value]
