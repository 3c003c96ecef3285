"""The machine's default Docker engine is a contributor's, and the suite only a guest: scripts/test gives it a
sentinel — a container and BuildKit cache entries of its own — and writes down what the engine holds before the
tests (`before FILE`). After them (`after FILE`) the engine must be the same process, the sentinel whole, and
nothing of the suite's on it; what else changed meanwhile is reported (a contributor's own work goes on beside a
run), since the tests cannot reach this engine at all (scripts/test-engine exec masks its socket). The sentinel is
removed then, its cache entries too. Exit 1 with what failed.

python -m tests.support.host_engine before|after FILE
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HOST = "unix:///var/run/docker.sock"  # the machine's default engine, whatever DOCKER_HOST says
PIDFILE = Path("/var/run/docker.pid")
SUITE_LABELS = ("dev.preview-orchestrator.deployment", "dev.preview-orchestrator.owner")


def docker(*argv: str, timeout: float = 300) -> str:
    result = subprocess.run(["docker", "-H", HOST, *argv], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(argv)}: {(result.stderr or result.stdout).strip()[-500:]}")
    return result.stdout


def running() -> bool:
    return subprocess.run(["docker", "-H", HOST, "info"], capture_output=True, timeout=30).returncode == 0


def daemon() -> str:
    """The engine's process as pid and start time: another value means it was stopped or restarted."""
    try:
        pid = PIDFILE.read_text().strip()
        return f"{pid}:{Path(f'/proc/{pid}/stat').read_text().split(')')[-1].split()[19]}"
    except (OSError, IndexError):
        return "unknown"


def cache_ids() -> list[str]:
    entries = json.loads(docker("system", "df", "--verbose", "--format", "{{json .BuildCache}}") or "[]") or []
    return sorted(entry["ID"].rstrip("*") for entry in entries)


def state() -> dict[str, Any]:
    """Containers (with when each started), images and BuildKit cache entries of the machine's engine."""
    ids = docker("ps", "--all", "--quiet", "--no-trunc").split()
    started = {}
    for line in docker("inspect", "--format", "{{.Id}} {{.State.StartedAt}}", *ids).splitlines() if ids else []:
        ident, _, when = line.partition(" ")
        started[ident] = when
    return {"daemon": daemon(), "containers": started, "cache": cache_ids(),
            "images": sorted(set(docker("images", "--all", "--quiet", "--no-trunc").split()))}


def plant(mark: str) -> dict[str, Any]:
    """The sentinel: an image built by compose through BuildKit (so that it leaves cache entries, as a
    contributor's builds do) and a container created from it."""
    cache_before = set(cache_ids())
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "mark").write_text(mark)
        (folder / "Dockerfile").write_text("FROM scratch\nCOPY mark /mark\n")
        image = f"po-test-sentinel:{mark}"
        (folder / "compose.yml").write_text(f"services:\n  sentinel:\n    build: .\n    image: {image}\n")
        docker("compose", "--project-directory", scratch, "-p", f"po-test-sentinel-{mark}", "build")
    container = docker("create", "--name", f"po-test-sentinel-{mark}", image, "/mark").strip()
    return {"image": image, "container": container, "cache": sorted(set(cache_ids()) - cache_before)}


def before(path: Path) -> int:
    if not running():
        path.write_text(json.dumps({"running": False}))
        print("== the machine's default engine does not run: there is nothing of it to keep")
        return 0
    sentinel = plant(secrets.token_hex(4))
    recorded = state()
    path.write_text(json.dumps({"running": True, "sentinel": sentinel, "state": recorded}))
    print(f"== the machine's default engine: {len(recorded['containers'])} containers, {len(recorded['cache'])} "
          f"build cache entries, and the sentinel {sentinel['image']}")
    return 0


def remove_sentinel(sentinel: dict[str, Any]) -> None:
    subprocess.run(["docker", "-H", HOST, "rm", "--force", sentinel["container"]], capture_output=True, timeout=60)
    subprocess.run(["docker", "-H", HOST, "rmi", sentinel["image"]], capture_output=True, timeout=60)
    for _ in range(2):  # an entry a removed one held is free the second time
        for ident in sentinel["cache"]:
            subprocess.run(["docker", "-H", HOST, "builder", "prune", "--force", "--filter", f"id={ident}"],
                           capture_output=True, timeout=60)


def after(path: Path) -> int:
    recorded = json.loads(path.read_text())
    if not recorded["running"]:
        return 0
    if not running():
        print("FAILED: the machine's default engine stopped during the tests", file=sys.stderr)
        return 1
    was, now, sentinel = recorded["state"], state(), recorded["sentinel"]
    failed = []
    if now["daemon"] != was["daemon"]:
        failed.append("the engine's process was stopped or restarted")
    if sentinel["container"] not in now["containers"]:
        failed.append("the sentinel container is gone")
    elif now["containers"][sentinel["container"]] != was["containers"][sentinel["container"]]:
        failed.append("the sentinel container was started")
    if not docker("images", "--quiet", sentinel["image"]).strip():
        failed.append("the sentinel image is gone")
    failed += [f"the sentinel's build cache entry {ident} is gone" for ident in sentinel["cache"]
               if ident not in now["cache"]]
    for label in SUITE_LABELS:  # what a preview, a seed or a swarm node of the suite would carry
        made = docker("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={label}").split()
        failed += [f"a container labelled {label} appeared: {ident[:12]}" for ident in made
                   if ident not in was["containers"]]
    remove_sentinel(sentinel)
    # Not the suite's doing (it cannot reach this engine), and a contributor may be working: said, not failed.
    changed = [f"container {ident[:12]} {'was restarted' if ident in now['containers'] else 'is gone'}"
               for ident, when in was["containers"].items() if now["containers"].get(ident) != when]
    changed += [f"{len(set(was['images']) - set(now['images']))} images and "
                f"{len(set(was['cache']) - set(now['cache']))} build cache entries are gone"] \
        if set(was["images"]) - set(now["images"]) or set(was["cache"]) - set(now["cache"]) else []
    if changed:
        print("== changed meanwhile on the machine's default engine, by another program:\n  " + "\n  ".join(changed))
    if failed:
        print("FAILED: the tests changed the machine's default engine:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    print(f"== the machine's default engine is as it was: the same process, the sentinel container, image and "
          f"{len(sentinel['cache'])} build cache entries whole, nothing of the suite's on it")
    return 0


if __name__ == "__main__":
    command, file = sys.argv[1], Path(sys.argv[2])
    sys.exit(before(file) if command == "before" else after(file))
