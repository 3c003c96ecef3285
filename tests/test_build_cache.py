"""The repository build cache of the Go template (RenderContext.cache_mount): one per repository, nobody else's.

Rendering is checked without the engine; with it, the cache is shown to be kept between builds of one repository
and to stay out of reach of another repository's Dockerfile — the cache a hostile pull request would try first
(the default id of a mount at Go's cache directory) and the one of another repository are both empty."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from orchestrator.plugin_api.types import CACHE_ID_PREFIX
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, make_context, render_deployment, write_rendered
from orchestrator.rendering.plugin_host import PluginHost
from tests.conftest import SettingsFactory
from tests.support.engines import engine_for
from tests.support.standins import STANDIN_OVERRIDES, require_engine

SAMPLES = Path(__file__).parent / "sample_apps"
KEY = b"build-cache-test-key"  # fixed: the engine keeps the caches these tests fill, later runs reuse them
GO_CACHE = "/root/.cache/go-build"
MOUNT = re.compile(r"--mount=type=cache,id=(po-cache-[0-9a-f]{32}),target=/root/\.cache/go-build ")


def go_dockerfile(host: PluginHost, repo: Path, owner: str, name: str, pr: int, key: bytes | None = KEY,
                  build_cache: bool = True) -> str:
    shutil.copytree(SAMPLES / "go", repo, dirs_exist_ok=True)
    context = make_context(owner, name, pr, 8001, 9001, key, STANDIN_OVERRIDES, build_cache)
    rendered = render_deployment(host, repo, load_checkout_config(host, repo), context)
    write_rendered(repo, rendered)
    return rendered.files[INJECTED_DOCKERFILE]


@pytest.mark.uses("go")
def test_the_go_build_step_mounts_one_cache_per_repository(host: PluginHost, tmp_path: Path) -> None:
    first = go_dockerfile(host, tmp_path / "a1", "acme", "shop", 1)
    build_lines = [line for line in first.splitlines() if line.startswith("RUN ")]
    assert [bool(MOUNT.search(line)) for line in build_lines] == [False, True]  # go mod download, go build
    ident = MOUNT.findall(first)[0]
    assert MOUNT.findall(go_dockerfile(host, tmp_path / "a2", "acme", "shop", 2)) == [ident]  # the next PR's
    assert MOUNT.findall(go_dockerfile(host, tmp_path / "b", "acme", "billing", 1)) != [ident]  # another repo
    assert MOUNT.findall(go_dockerfile(host, tmp_path / "c", "acme", "shop", 1, key=b"another key")) != [ident]
    # two repositories whose names make the same slug (acme-shop-api) still have a cache each
    dotted, dashed = (make_context("acme", name, 1, 8001, 9001, KEY, build_cache=True).cache_mount("go-build", GO_CACHE)
                      for name in ("shop.api", "shop-api"))
    assert dotted != dashed
    for plain in (go_dockerfile(host, tmp_path / "d", "acme", "shop", 1, build_cache=False),  # BUILD_CACHE_MOUNTS
                  go_dockerfile(host, tmp_path / "e", "acme", "shop", 1, key=None)):  # `render` without secrets
        assert "--mount" not in plain and "RUN go build" in plain


def test_a_cache_mount_takes_no_option_from_its_arguments() -> None:
    context = make_context("acme", "shop", 1, 8001, 9001, KEY, build_cache=True)
    for name, target in (("go-build", "/cache,id=po-cache-0"), ("go-build", "relative"), ("Go,id=x", "/cache"),
                         ("go-build", "/cache target"), ("go-build", "/cache\n"), ("go-build\n", "/cache")):
        with pytest.raises(ValueError, match="cache mount"):
            context.cache_mount(name, target)


def test_comments_never_show_a_cache_id(make_settings: SettingsFactory) -> None:
    context = make_context("acme", "shop", 1, 8001, 9001, KEY, build_cache=True)
    line = f"#9 [app build 5/5] RUN {context.cache_mount('go-build', GO_CACHE)}go build ."
    masked = engine_for(make_settings()).context.mask(line)
    assert CACHE_ID_PREFIX in line and MOUNT.search(line)
    assert masked == f"#9 [app build 5/5] RUN --mount=type=cache,id={CACHE_ID_PREFIX}***,target={GO_CACHE} go build ."
    # nor a built image's keyed name (a base preview's kept dependencies are one, read by other builds)
    line = f"#2 [dependencies 1/3] FROM docker.io/{context.kept_dependencies()}:latest"
    masked = engine_for(make_settings()).context.mask(line)
    assert masked == "#2 [dependencies 1/3] FROM docker.io/po-build/***-dependencies:latest"


def compose_build(directory: Path, project: str) -> str:
    """Build as the service does (compose v2: BuildKit); returns the image."""
    (directory / "compose.cache-test.yml").write_text(f"services:\n  app:\n    build: .\n    image: {project}-app\n")
    subprocess.run(["docker", "compose", "-p", project, "-f", "compose.cache-test.yml", "build", "--progress",
                    "plain"], cwd=directory, check=True, capture_output=True, timeout=600)
    return f"{project}-app"


def listing(directory: Path, project: str, mount: str) -> list[str]:
    """Build an image whose /listing holds what a RUN step with `mount` finds there, and read it."""
    (directory / "Dockerfile").write_text(
        f"FROM {STANDIN_OVERRIDES['debian:bookworm-slim']}\n"
        f"RUN {mount}sh -c 'find {GO_CACHE} -type f 2>/dev/null | head -n 50 > /listing; true'\n")
    image = compose_build(directory, project)
    try:
        found = subprocess.run(["docker", "run", "--rm", image, "cat", "/listing"], capture_output=True, text=True,
                               check=True, timeout=60).stdout.split()
    finally:
        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True, timeout=60)
    return found


@pytest.mark.docker
@pytest.mark.uses("go")
def test_the_build_cache_is_kept_for_the_repository_and_out_of_reach_of_another(host: PluginHost,
                                                                                tmp_path: Path) -> None:
    require_engine()
    run = uuid.uuid4().hex[:8]
    go_dockerfile(host, tmp_path / "shop", "acme", "shop", 1)
    shutil.copy(tmp_path / "shop" / INJECTED_DOCKERFILE, tmp_path / "shop" / "Dockerfile")
    image = compose_build(tmp_path / "shop", f"cache-shop-{run}")
    subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True, timeout=60)

    shop = make_context("acme", "shop", 2, 8002, 9002, KEY, build_cache=True)
    billing = make_context("acme", "billing", 1, 8003, 9003, KEY, build_cache=True)
    probes = {
        "the same repository's next pull request": shop.cache_mount("go-build", GO_CACHE),
        "another repository's own cache": billing.cache_mount("go-build", GO_CACHE),
        "a hostile Dockerfile's guess (the default id)": f"--mount=type=cache,target={GO_CACHE} ",
        "a hostile Dockerfile's guess (a plain name)": f"--mount=type=cache,id=go-build,target={GO_CACHE} ",
    }
    found = {}
    for number, (who, mount) in enumerate(probes.items()):
        probe = tmp_path / f"probe-{number}"
        probe.mkdir()
        found[who] = listing(probe, f"cache-probe-{run}-{number}", mount)
    assert found.pop("the same repository's next pull request"), "the Go build left nothing in the cache"
    assert found == {who: [] for who in found}


@pytest.mark.docker
@pytest.mark.uses("go")
def test_a_repository_s_own_dockerfile_caches_are_its_own(host: PluginHost, tmp_path: Path) -> None:
    """BuildKit keeps a cache mount by its id, the target when none is given, for the whole engine: a Dockerfile
    with `--mount=type=cache,target=X` would read what another repository's pull request put at X. Each cache mount
    of a repository's own Dockerfile gets an id keyed by its repository (rendering/dockerfile_cache.py): the
    repository's next pull request finds what the first left, another repository finds nothing."""
    require_engine()
    run = uuid.uuid4().hex[:8]
    target = f"/var/cache/po-test-{run}"  # a cache no earlier run filled
    base = STANDIN_OVERRIDES["debian:bookworm-slim"]
    plant = f"FROM {base}\nRUN --mount=type=cache,target={target} sh -c 'echo planted > {target}/note'\n"
    read = (f"FROM {base}\nRUN --mount=type=cache,target={target} \\\n    sh -c 'cat {target}/note > /seen "
            "2>/dev/null || echo nothing > /seen'\n")
    images = []

    def build(name: str, pr: int, dockerfile: str) -> str:
        repo = tmp_path / f"{name}-{pr}"
        shutil.copytree(SAMPLES / "go", repo)
        (repo / "Dockerfile").write_text(dockerfile)
        context = make_context("acme", name, pr, 8001, 9001, KEY, STANDIN_OVERRIDES, True)
        rendered = render_deployment(host, repo, load_checkout_config(host, repo), context)
        compose = write_rendered(repo, rendered)
        used = rendered.compose["services"]["app"]["build"]["dockerfile"]
        assert used == str(tmp_path / f"{name}-{pr}.build" / "app.Dockerfile")  # beside the checkout, not in it
        assert (repo / "Dockerfile").read_text() == dockerfile
        subprocess.run(["docker", "compose", "-p", f"cache-own-{run}-{name}-{pr}", "-f", str(compose), "build",
                        "app"], cwd=repo, check=True, capture_output=True, timeout=600)
        images.append(rendered.compose["services"]["app"]["image"])
        return images[-1]

    def seen(image: str) -> str:
        return subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", image, "/seen"], capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()

    try:
        build("shop", 1, plant)
        assert seen(build("billing", 1, read)) == "nothing"  # the raw target would have given "planted"
        assert seen(build("shop", 2, read)) == "planted"  # the repository's own cache is kept
    finally:
        subprocess.run(["docker", "image", "rm", "-f", *images], capture_output=True, timeout=60)
