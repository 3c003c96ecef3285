"""Each built-in Dockerfile builds with the real engine from stand-in images, and the app it builds serves.

Rendered without cache mounts (BUILD_CACHE_MOUNTS=false) and built by the classic builder (DOCKER_BUILDKIT=0):
every template must build there too. The service's own builds (compose, BuildKit) run in the end-to-end tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, make_context, render_deployment, write_rendered
from orchestrator.rendering.plugin_host import PluginHost
from tests.support import web
from tests.support.standins import STANDIN_OVERRIDES, require_engine

SAMPLES = Path(__file__).parent / "sample_apps"
pytestmark = pytest.mark.docker


def docker(*args: str, timeout: float = 600) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:2])} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout.strip()


@pytest.mark.parametrize("framework", ["nestjs", "go", "laravel", "rust", "python"])
def test_builtin_dockerfile_builds_and_serves(host: PluginHost, tmp_path: Path, framework: str) -> None:
    require_engine()
    repo = tmp_path / framework
    shutil.copytree(SAMPLES / framework, repo)
    config = load_checkout_config(host, repo)
    context = make_context("acme", "sample", 1, 8001, 9001, b"k", STANDIN_OVERRIDES, build_cache=False)
    rendered = render_deployment(host, repo, config, context)
    assert INJECTED_DOCKERFILE in rendered.files
    write_rendered(repo, rendered)

    tag = f"po-test/{framework}:{uuid.uuid4().hex[:8]}"
    docker("build", "-q", "-f", str(repo / INJECTED_DOCKERFILE), "-t", tag, str(repo))
    container = ""
    try:
        # the image's own non-root user: node (1000), www-data (33), app or 10001
        assert docker("image", "inspect", "-f", "{{.Config.User}}", tag) in ("10001:10001", "node", "www-data", "app")
        container = docker("run", "-d", "-p", f"127.0.0.1::{config.app_port}", "-e", f"PORT={config.app_port}", tag)
        published = docker("port", container, str(config.app_port)).splitlines()[0]
        url = f"http://{published}"
        body = ""
        for _ in range(100):
            try:
                if web.get(f"{url}/health", timeout=2).text == "ok":
                    body = web.get(f"{url}/", timeout=2).text
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        assert body == f"{framework} says: commit A\n", docker("logs", container)
        assert docker("exec", container, "id", "-u") != "0"
    finally:
        if container:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60)
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, timeout=60)
