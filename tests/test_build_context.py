"""What the service writes into a checkout (compose file with the database password, injected Dockerfile, the
`.git` file of the separate git directory) stays out of the images: the images hold only the repository, and
two previews of the same commit build the same image from the cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.rendering.build_context import MARKER, keep_out_of_images
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import make_context, render_deployment, write_rendered
from orchestrator.rendering.plugin_host import build_plugin_host
from tests.support.git_repos import make_pr_repo
from tests.support.standins import STANDIN_OVERRIDES, require_engine


def test_the_repository_s_own_ignores_are_kept_and_ours_replaced_not_repeated(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("node_modules\n*.log\n")
    keep_out_of_images(tmp_path, ["compose.preview.yml", "Dockerfile.preview-orchestrator"])
    keep_out_of_images(tmp_path, ["compose.preview.yml"])  # a second deploy of the same checkout
    assert (tmp_path / ".dockerignore").read_text() == (
        f"node_modules\n*.log\n\n{MARKER}\n/.git\n/compose.preview.yml\n")


def test_an_injected_dockerfile_gets_the_same_rules_in_its_own_ignore_file(tmp_path: Path) -> None:
    """BuildKit prefers `<Dockerfile>.dockerignore`: a pull request's own one (here: keeping everything) would
    put the injected Dockerfile, with the repository's build-cache id, into the image."""
    (tmp_path / ".dockerignore").write_text("node_modules\n")
    (tmp_path / "Dockerfile.preview-orchestrator.dockerignore").write_text("# keep everything\n")
    keep_out_of_images(tmp_path, ["compose.preview.yml", "Dockerfile.preview-orchestrator"])
    expected = (f"node_modules\n\n{MARKER}\n/.git\n/Dockerfile.preview-orchestrator\n"
                "/Dockerfile.preview-orchestrator.dockerignore\n/compose.preview.yml\n")
    assert (tmp_path / ".dockerignore").read_text() == expected
    assert (tmp_path / "Dockerfile.preview-orchestrator.dockerignore").read_text() == expected


def test_without_a_dockerignore_one_is_written(tmp_path: Path) -> None:
    keep_out_of_images(tmp_path, ["compose.preview.yml"])
    keep_out_of_images(tmp_path, ["compose.preview.yml"])
    assert (tmp_path / ".dockerignore").read_text() == f"{MARKER}\n/.git\n/compose.preview.yml\n"


def test_a_linked_dockerignore_is_replaced_never_written_through(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    elsewhere = checkout / "notes.txt"
    elsewhere.write_text("the author's file\n")
    (checkout / ".dockerignore").symlink_to(elsewhere)
    keep_out_of_images(checkout, ["compose.preview.yml"])
    assert elsewhere.read_text() == "the author's file\n"
    assert not (checkout / ".dockerignore").is_symlink()
    assert (checkout / ".dockerignore").read_text() == f"{MARKER}\n/.git\n/compose.preview.yml\n"


def _render_and_build(repo_url: str, branch: str, work: Path, pr: int) -> str:
    subprocess.run(["git", "clone", "-q", "--separate-git-dir", f"{work}.git", "--branch", branch, repo_url,
                    str(work)], check=True, capture_output=True, timeout=60)
    # as if the pull request shipped it: an ignore file of the injected Dockerfile that keeps everything
    (work / "Dockerfile.preview-orchestrator.dockerignore").write_text("# keep everything\n")
    plugins = build_plugin_host()
    config = load_checkout_config(plugins, work)
    # per preview: its own number, ports and password key — everything the generated files differ by
    context = make_context("acme", "api", pr, 18000 + pr, 19000 + pr, f"key-{pr}".encode(), STANDIN_OVERRIDES)
    rendered = render_deployment(plugins, work, config, context)
    compose = write_rendered(work, rendered)
    project = f"build-context-test-{pr}"
    built = subprocess.run(["docker", "compose", "-p", project, "-f", str(compose), "--progress", "plain", "build",
                            "app"], cwd=work, check=True, capture_output=True, text=True, timeout=600)
    # BuildKit's steps (what doctor's BuildKit line promises), not the classic builder's "Step 1/9"
    assert "[app internal] load build definition" in built.stdout + built.stderr
    image: str = rendered.compose["services"]["app"]["image"]  # keyed: RenderContext.built_image
    assert image.startswith("po-build/") and image.endswith("-app") and project not in image
    return image


@pytest.mark.docker
def test_two_previews_of_one_commit_build_one_image_without_the_generated_files(tmp_path: Path) -> None:
    require_engine()
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/context")
    images = [_render_and_build(repo.clone_url, repo.branch, tmp_path / f"pr-{pr}", pr) for pr in (1, 2)]
    try:
        layers = [subprocess.run(["docker", "image", "inspect", "-f", "{{json .RootFS.Layers}}", image], check=True,
                                 capture_output=True, text=True, timeout=30).stdout.strip() for image in images]
        # every layer from the cache: the second preview built nothing new (the images differ only by the
        # project label compose puts on them)
        assert layers[0] == layers[1]
        listing = subprocess.run(["docker", "run", "--rm", "--entrypoint", "ls", images[0], "-a", "/app"],
                                 check=True, capture_output=True, text=True, timeout=60).stdout.split()
        assert "app.py" in listing  # the repository is there
        assert not {"compose.preview.yml", "Dockerfile.preview-orchestrator", ".git",
                    "Dockerfile.preview-orchestrator.dockerignore"} & set(listing), listing
    finally:
        subprocess.run(["docker", "image", "rm", "--force", *images], capture_output=True, timeout=60)


@pytest.mark.docker
def test_an_app_without_a_sigterm_handler_stops_on_sigterm(tmp_path: Path) -> None:
    """The sample app installs no handler and runs as PID 1, which ignores SIGTERM: without the init process
    compose injects (`init: true`), `docker stop` would wait out its timeout and SIGKILL it (exit 137) on every
    update and cleanup."""
    require_engine()
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/signals")
    work = tmp_path / "pr-3"
    image = _render_and_build(repo.clone_url, repo.branch, work, 3)
    project = "build-context-test-3"  # _render_and_build's
    assert image.startswith("po-build/")
    compose = ["docker", "compose", "-p", project, "-f", str(work / "compose.preview.yml")]
    try:
        subprocess.run([*compose, "up", "--detach", "--no-build", "--no-deps", "app"], cwd=work, check=True,
                       capture_output=True, timeout=120)
        container = subprocess.run([*compose, "ps", "--all", "--quiet", "app"], cwd=work, check=True,
                                   capture_output=True, text=True, timeout=30).stdout.strip()
        subprocess.run(["docker", "stop", "--time", "60", container], check=True, capture_output=True, timeout=90)
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}} {{.HostConfig.Init}}", container],
                               check=True, capture_output=True, text=True, timeout=30).stdout.split()
        assert state == ["143", "true"]  # 128 + SIGTERM: stopped by the signal, not killed after the timeout
    finally:
        subprocess.run([*compose, "down", "--volumes", "--rmi", "local", "--timeout", "1"], cwd=work,
                       capture_output=True, timeout=120)
