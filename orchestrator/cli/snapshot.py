"""`preview-orchestrator up DIR`: the directory as it is now (what .gitignore leaves), committed to a repository
of its own under the user's cache, so that the service can clone it like any other.

Run as the user who calls `up`, with git's own directory named explicitly: DIR's `.git` (if any) is neither read
nor changed, so uncommitted work is deployed too and DIR's history is untouched.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BRANCH = "preview"


@dataclass(frozen=True)
class Snapshot:
    repository: Path
    branch: str
    sha: str


class SnapshotError(Exception):
    pass


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "preview-orchestrator" / "local"


def take(directory: Path, name: str, cache: Path | None = None) -> Snapshot:
    repository = (cache or cache_dir()) / f"{name}.git"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), "LANG": "C.UTF-8",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
           "GIT_INDEX_FILE": str(repository / "preview-index"), "GIT_AUTHOR_NAME": "preview-orchestrator up",
           "GIT_AUTHOR_EMAIL": "up@preview-orchestrator.invalid", "GIT_COMMITTER_NAME": "preview-orchestrator up",
           "GIT_COMMITTER_EMAIL": "up@preview-orchestrator.invalid"}

    def git(*args: str, check: bool = True) -> str:
        result = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", f"--git-dir={repository}",
                                 f"--work-tree={directory}", *args], cwd=directory, env=env, capture_output=True,
                                text=True, timeout=600)
        if check and result.returncode != 0:
            raise SnapshotError(f"git {args[0]} failed: {result.stderr.strip()[-500:]}")
        return result.stdout.strip()

    if not directory.is_dir():
        raise SnapshotError(f"{directory} is not a directory")
    repository.parent.mkdir(parents=True, exist_ok=True)
    if not (repository / "HEAD").is_file():
        subprocess.run(["git", "init", "--quiet", "--bare", str(repository)], env=env, check=True, timeout=60,
                       capture_output=True)
    git("add", "--all", ".")
    tree = git("write-tree")
    parent = git("rev-parse", "--quiet", "--verify", f"refs/heads/{BRANCH}", check=False)
    if parent and git("rev-parse", f"{parent}^{{tree}}") == tree:
        return Snapshot(repository, BRANCH, parent)  # nothing changed since the last `up`
    message = f"preview-orchestrator up of {directory} at {datetime.now(UTC).isoformat(timespec='seconds')}"
    sha = git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", message)
    git("update-ref", f"refs/heads/{BRANCH}", sha)
    return Snapshot(repository, BRANCH, sha)
