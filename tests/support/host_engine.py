"""The machine's default Docker engine is a contributor's, and the suite only a guest: scripts/test gives it a
sentinel — a container and a build-cache entry of its own — and writes down what the engine holds before the
tests (`before FILE`); after them (`after FILE`) everything is still there, no container was restarted, and the
suite left nothing of its own on it. The sentinel is removed then. Exit 1 with what changed.

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


def docker(*argv: str, timeout: float = 300) -> str:
    result = subprocess.run(["docker", "-H", HOST, *argv], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(argv)}: {(result.stderr or result.stdout).strip()[-500:]}")
    return result.stdout


def running() -> bool:
    return subprocess.run(["docker", "-H", HOST, "info"], capture_output=True, timeout=30).returncode == 0


def state() -> dict[str, Any]:
    """Containers (with when each started), images and BuildKit cache entries of the machine's engine."""
    ids = docker("ps", "--all", "--quiet", "--no-trunc").split()
    started = {}
    for line in docker("inspect", "--format", "{{.Id}} {{.State.StartedAt}}", *ids).splitlines() if ids else []:
        ident, _, when = line.partition(" ")
        started[ident] = when
    cache = json.loads(docker("system", "df", "--verbose", "--format", "{{json .BuildCache}}") or "[]") or []
    return {"containers": started, "images": sorted(set(docker("images", "--all", "--quiet", "--no-trunc").split())),
            "cache": sorted(entry["ID"] for entry in cache)}


def plant(mark: str) -> dict[str, str]:
    """The sentinel: an image built by compose through BuildKit (so that it leaves cache entries, as a
    contributor's builds do) and a container created from it."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "mark").write_text(mark)
        (folder / "Dockerfile").write_text("FROM scratch\nCOPY mark /mark\n")
        image = f"po-test-sentinel:{mark}"
        (folder / "compose.yml").write_text(f"services:\n  sentinel:\n    build: .\n    image: {image}\n")
        docker("compose", "--project-directory", scratch, "-p", f"po-test-sentinel-{mark}", "build")
    container = docker("create", "--name", f"po-test-sentinel-{mark}", image, "/mark").strip()
    return {"image": image, "container": container}


def before(path: Path) -> int:
    if not running():
        path.write_text(json.dumps({"running": False}))
        print("== the machine's default engine does not run: there is nothing of it to keep")
        return 0
    sentinel = plant(secrets.token_hex(4))
    path.write_text(json.dumps({"running": True, "sentinel": sentinel, "state": state()}))
    print(f"== the machine's default engine: {len(state()['containers'])} containers, sentinel {sentinel['image']}")
    return 0


def after(path: Path) -> int:
    recorded = json.loads(path.read_text())
    if not recorded["running"]:
        return 0
    if not running():
        print("FAILED: the machine's default engine stopped during the tests", file=sys.stderr)
        return 1
    was, now = recorded["state"], state()
    problems = [f"container {ident[:12]} is gone" for ident in was["containers"] if ident not in now["containers"]]
    problems += [f"container {ident[:12]} was restarted" for ident, when in was["containers"].items()
                 if ident in now["containers"] and now["containers"][ident] != when]
    problems += [f"image {ident[:19]} is gone" for ident in was["images"] if ident not in now["images"]]
    problems += [f"build cache entry {ident} is gone" for ident in was["cache"] if ident not in now["cache"]]
    # What a preview, a seed or a swarm node of the suite would carry (DEPLOYMENT_LABEL, OWNER_LABEL), made since.
    for label in ("dev.preview-orchestrator.deployment", "dev.preview-orchestrator.owner"):
        made = docker("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={label}").split()
        problems += [f"a container labelled {label} appeared: {ident[:12]}" for ident in made
                     if ident not in was["containers"]]
    sentinel = recorded["sentinel"]
    docker("rm", "--force", sentinel["container"])
    docker("rmi", sentinel["image"])
    if problems:
        print("FAILED: the tests changed the machine's default engine:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"== the machine's default engine is as it was: {len(was['containers'])} containers (the sentinel's "
          f"among them), {len(was['images'])} images, {len(was['cache'])} build cache entries")
    return 0


if __name__ == "__main__":
    command, file = sys.argv[1], Path(sys.argv[2])
    sys.exit(before(file) if command == "before" else after(file))
