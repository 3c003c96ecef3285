"""Local git repositories standing in for the code host's: a bare repo with a branch of two commits."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SAMPLES = Path(__file__).resolve().parents[1] / "sample_apps"
GIT_ENV = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "t@example.test", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "t@example.test", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


@dataclass(frozen=True)
class PullRequestRepo:
    clone_url: str
    branch: str
    sha_a: str
    sha_b: str


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def make_pr_repo(root: Path, sample: str, branch: str, config: dict[str, Any] | None = None,
                 files: dict[str, str] | None = None, drop: tuple[str, ...] = (),
                 files_b: dict[str, str] | None = None, links: dict[str, str] | None = None) -> PullRequestRepo:
    """A bare repository whose `branch` has commit A (message "commit A", plus symbolic links `links`: name ->
    target) then commit B ("commit B", plus `files_b`)."""
    work = root / f"{branch.replace('/', '_')}-work"
    shutil.copytree(SAMPLES / sample, work)
    if config is not None:
        (work / "preview-config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for name in drop:
        (work / name).unlink()
    for name, text in (files or {}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    for name, target in (links or {}).items():
        (work / name).symlink_to(target)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "commit A")
    sha_a = git(work, "rev-parse", "HEAD")
    (work / "message.txt").write_text("commit B\n")
    for name, text in (files_b or {}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "commit B")
    sha_b = git(work, "rev-parse", "HEAD")
    bare = root / f"{branch.replace('/', '_')}.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "branch", "-m", "main", branch)
    return PullRequestRepo(clone_url=str(bare), branch=branch, sha_a=sha_a, sha_b=sha_b)
