"""A bare mirror per repository under the state directory: a new pull request of a repository the service has
seen fetches only what is new over the network, then clones locally from the mirror.

One mirror per repository (`{STATE_DIR}/mirrors/{projectSlug}-{digest}.git`, 0700, root: common/naming.mirror_name,
the digest of the repository's identity, as two repositories can share a slug), so a repository never reads
another one's objects. It has no remote configured: every fetch names the URL, and the code host's token
reaches git only through the environment (git.py), never the mirror's config. A mirror that git cannot use (a
crash mid-write, a full disk) is removed and the clone goes to the code host directly; the next one rebuilds it.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from orchestrator.common.commands import CommandFailed

log = logging.getLogger("orchestrator.adapters.git_mirror")
GitCall = Callable[[list[str], Path | None], str]  # argv after `git`, and the working directory
_KEYED = re.compile(r"-[0-9a-f]{12}\.git$")  # common/naming.mirror_name's


class Mirrors:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, name: str) -> Path:
        return self.root / f"{name}.git"

    def refresh(self, name: str, clone_url: str, branch: str, git: GitCall) -> Path | None:
        """Fetch `branch` of `clone_url` into the mirror (created on first use); None when the mirror cannot be
        used, and then it is gone. One process at a time per mirror (pull requests of one repository build in
        parallel)."""
        mirror = self.path(name)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with FileLock(str(mirror) + ".lock", timeout=600):
            try:
                if not (mirror / "HEAD").is_file():
                    shutil.rmtree(mirror, ignore_errors=True)
                    git(["init", "--quiet", "--bare", str(mirror)], None)
                    mirror.chmod(0o700)
                # `+`: a force-pushed branch replaces what the mirror had.
                git([f"--git-dir={mirror}", "fetch", "--quiet", "--prune", "--no-tags", "--", clone_url,
                     f"+refs/heads/{branch}:refs/heads/{branch}"], None)
                git([f"--git-dir={mirror}", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], None)
            except (CommandFailed, OSError) as exc:
                log.warning("mirror %s not usable, removed: %s", mirror.name, exc)
                shutil.rmtree(mirror, ignore_errors=True)
                return None
        return mirror

    def remove_unkeyed(self) -> list[str]:
        """Remove the mirrors of the layout before 0.2 (`{slug}.git`: shared by repositories whose names give one
        slug); they are fetched again, per repository, by the next pull request. Returns their names."""
        removed = []
        for path in self.root.glob("*.git") if self.root.is_dir() else []:
            if not _KEYED.search(path.name):
                shutil.rmtree(path, ignore_errors=True)
                Path(str(path) + ".lock").unlink(missing_ok=True)
                removed.append(path.name)
        return removed

    def remove(self, name: str) -> None:
        shutil.rmtree(self.path(name), ignore_errors=True)
        Path(str(self.path(name)) + ".lock").unlink(missing_ok=True)
