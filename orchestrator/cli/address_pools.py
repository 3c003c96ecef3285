"""How many networks the Docker engine can still create: each preview is a compose project with a network of
its own, and Docker takes their subnets from its address pools — by default about 30 networks (docs/scaling.md,
"Many previews on one host"). Read from the engine's configuration: `default-address-pools` in daemon.json, or
`--default-address-pool` on dockerd's command line; neither, Docker's built-in pools."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from pathlib import Path

# What an engine without default-address-pools uses: 172.17-31.0.0/16 and 192.168.0.0/16 in /20s.
DOCKER_DEFAULT_POOLS: tuple[tuple[str, int], ...] = (
    *((f"172.{second}.0.0/16", 16) for second in range(17, 32)), ("192.168.0.0/16", 20))
DAEMON_JSON = Path("/etc/docker/daemon.json")
SUGGESTED = '"default-address-pools": [{"base": "172.16.0.0/12", "size": 24}]'


def capacity(pools: Iterable[tuple[str, int]]) -> int:
    """Networks the pools can hold: each base split into subnets of `size` bits."""
    total = 0
    for base, size in pools:
        network = ipaddress.ip_network(base, strict=False)
        if size >= network.prefixlen:
            total += 2 ** (size - network.prefixlen)
    return total


def configured_pools(daemon_json: str | None, dockerd_args: list[str]) -> tuple[list[tuple[str, int]], str]:
    """The engine's pools and where they were read; Docker's defaults when neither source names any."""
    if daemon_json:
        try:
            listed = json.loads(daemon_json).get("default-address-pools") or []
            pools = [(str(item["base"]), int(item["size"])) for item in listed]
        except (ValueError, KeyError, TypeError, AttributeError):
            pools = []
        if pools:
            return pools, "daemon.json"
    pools = []
    for index, arg in enumerate(dockerd_args):
        value = (arg.partition("=")[2] if arg.startswith("--default-address-pool=") else
                 dockerd_args[index + 1] if arg == "--default-address-pool" and index + 1 < len(dockerd_args) else
                 None)
        if value:
            fields = dict(part.partition("=")[::2] for part in value.split(","))
            if "base" in fields and fields.get("size", "").isdigit():
                pools.append((fields["base"], int(fields["size"])))
    if pools:
        return pools, "dockerd's command line"
    return list(DOCKER_DEFAULT_POOLS), "Docker's defaults"


def local_dockerd_args() -> list[str]:
    """The command line of a dockerd on this machine (empty when none is visible, e.g. a remote engine)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and Path(args[0].decode(errors="replace")).name == "dockerd":
            return [arg.decode(errors="replace") for arg in args[1:] if arg]
    return []


def read_daemon_json(path: Path = DAEMON_JSON) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
