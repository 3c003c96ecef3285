"""A third-party framework plugin, end to end: `deno` of the example distribution (tests/example_plugin/po_deno,
written only from docs/plugins.md and the hookspecs, installed by scripts/test) gives the Dockerfile and the app
service of a checkout whose preview-config.yml names it, and its preview deploys, updates and goes through the real
service, Docker, nginx and git.

This network cannot pull Deno's image: IMAGE_OVERRIDES maps it to the Python stand-in (as the built-in frameworks'
images are mapped to theirs, tests/support/standins.py), and the app is the Python sample, started by the plugin's
own `/bin/sh -c exec {app_entrypoint}`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from orchestrator.rendering.plugin_host import build_plugin_host
from tests.support.git_repos import make_pr_repo
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.support.standins import overrides_setting

pytestmark = [pytest.mark.docker, pytest.mark.live, pytest.mark.uses("postgres")]
DENO_IMAGE = "denoland/deno:2.0.0"  # the plugin's, as its template names it


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if "deno" not in build_plugin_host().provided.frameworks:
        pytest.fail("the example distribution is not installed: run scripts/test (or pip install -e "
                    "tests/example_plugin)")
    running = start_stack(tmp_path_factory.mktemp("deno-e2e"),
                          IMAGE_OVERRIDES=f"{overrides_setting()},{DENO_IMAGE}=po-standin/python:test")
    yield running
    stop_stack(running)


def test_a_third_party_framework_detects_builds_and_deploys(stack: Stack) -> None:
    pr = 42
    config = config_for("deno", "postgres", app_entrypoint="python3 app.py", app_port=8000)
    repo = make_pr_repo(stack.root / "repos", "python", "feature/deno", config=config, files={"deno.json": "{}\n"})
    stack.send("opened", pr, repo, repo.sha_a)
    record = stack.wait_for(pr, "running", repo.sha_a)
    assert record["framework"] == "deno"
    stack.wait_page(pr, "python says: commit A\n")
    assert stack.page(pr, "db").text == "db reachable"
    # the plugin's Dockerfile and app service are what runs: its user, its environment
    config_of = json.loads(subprocess.run(["docker", "inspect", "--format", "{{json .Config}}", f"{SLUG}-pr-{pr}-app"],
                                          capture_output=True, text=True, check=True, timeout=30).stdout)
    assert config_of["User"] == "10001:10001" and "DENO_NO_UPDATE_CHECK=1" in config_of["Env"]

    stack.send("synchronize", pr, repo, repo.sha_b)
    stack.wait_for(pr, "running", repo.sha_b)
    stack.wait_page(pr, "python says: commit B\n")
    stack.close(pr, repo, repo.sha_b)
