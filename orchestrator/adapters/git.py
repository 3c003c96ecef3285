"""Cloning and updating a pull request's checkout with git, as argument lists.

A code host's token reaches git only through GIT_CONFIG_* environment variables of that one git process
(an `http.extraHeader`), never the URL, a file, argv or the log — and only for clone URLs of that code host
(its plugin's `clone_authorization` decides).

The repository's git directory lives beside the checkout, not in it (`--separate-git-dir`), and every git
command names it explicitly: a preview's containers can see the checkout, and whatever they write there (a
`.git` file pointing elsewhere, hooks, `core.fsmonitor`) is never read by git. Git runs with hooks and
fsmonitor switched off and with no user or system configuration, so nothing in a checkout makes it run a
program.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.adapters.git_mirror import Mirrors
from orchestrator.common.commands import CommandFailed, DeploymentLog, run
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import SHA_PATTERN, branch_problem

# Overrides on every git command: no hook, no fsmonitor daemon, no helper program runs.
HARDENED = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "credential.helper=",
            "-c", "core.sshCommand=ssh", "-c", "protocol.ext.allow=never", "-c", "core.untrackedCache=false")


class CloneRefused(Exception):
    """The clone URL uses a transport the operator did not allow."""


def clone_url_problem(url: str, allowed_protocols: tuple[str, ...]) -> str | None:
    parts = urlsplit(url)
    scheme = parts.scheme.lower() if parts.scheme else ("file" if url.startswith("/") else "")
    if scheme not in allowed_protocols:
        return f"clone URL scheme {scheme or '(none)'} is not allowed (ALLOWED_CLONE_PROTOCOLS)"
    if any(ord(c) < 0x20 for c in url) or url.startswith("-"):
        return "clone URL is not valid"
    return None


class Git:
    def __init__(self, authorization: Callable[[str, str], str | None], allowed_protocols: tuple[str, ...],
                 timeout: float, env: HostEnv, mirrors: Mirrors | None = None) -> None:
        """`authorization(codehost, clone_url)`: the Authorization header the pull request's code host gives for
        the URL (its token, for its own URLs only), or None."""
        self._authorization = authorization
        self._protocols = allowed_protocols
        self._timeout = timeout
        self._env = env
        self._mirrors = mirrors

    def _environment(self, clone_url: str, local: bool, codehost: str | None) -> dict[str, str]:
        extra = {"GIT_ALLOW_PROTOCOL": "file" if local else ":".join(self._protocols)}
        if local:
            # A directory on this host, chosen by its operator (`preview-orchestrator up`); it may belong to
            # another user, which git refuses unless told that this one directory is safe.
            extra.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
                          "GIT_CONFIG_VALUE_0": clone_url})
        elif codehost is not None and (authorization := self._authorization(codehost, clone_url)):
            extra.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                          "GIT_CONFIG_VALUE_0": f"Authorization: {authorization}"})
        return self._env.git(extra)

    def _git(self, args: list[str], work_dir: Path, git_dir: Path | None, clone_url: str, log: DeploymentLog,
             control: FlowControl | None, local: bool, codehost: str | None = None) -> str:
        where = [] if git_dir is None else [f"--git-dir={git_dir}", f"--work-tree={work_dir}"]
        return run(["git", *HARDENED, *where, *args], cwd=work_dir if git_dir else None,
                   env=self._environment(clone_url, local, codehost), timeout=self._timeout, log=log, control=control)

    @staticmethod
    def has_checkout(work_dir: Path, git_dir: Path) -> bool:
        return work_dir.is_dir() and (git_dir / "HEAD").is_file()

    def remove_unkeyed_mirrors(self) -> list[str]:
        """Mirrors of the old layout, shared by repositories of one slug (git_mirror.Mirrors.remove_unkeyed)."""
        return self._mirrors.remove_unkeyed() if self._mirrors else []

    def clone(self, clone_url: str, branch: str, sha: str, work_dir: Path, git_dir: Path, log: DeploymentLog,
              control: FlowControl | None = None, local: bool = False, mirror: str | None = None,
              codehost: str | None = None) -> None:
        """`local`: `clone_url` is a directory of this host given by its operator (`preview-orchestrator up`),
        cloned whatever ALLOWED_CLONE_PROTOCOLS says (it is for URLs from webhooks). `mirror`: the name of the
        repository's mirror (git_mirror.py) to fetch into and clone from; the checkout's remote stays
        `clone_url`. `codehost`: the pull request's code host, the only one asked for credentials."""
        problem = clone_url_problem(clone_url, ("file",) if local else self._protocols)
        if problem:
            raise CloneRefused(problem)
        work_dir.parent.mkdir(parents=True, exist_ok=True)
        source = clone_url
        if mirror and self._mirrors and not local:
            def call(args: list[str], cwd: Path | None) -> str:
                return self._git(args, cwd or work_dir.parent, None, clone_url, log, control, local, codehost)

            source = str(self._mirrors.refresh(mirror, clone_url, branch, call) or clone_url)
        # From the mirror: a local clone (file transport, whatever ALLOWED_CLONE_PROTOCOLS says: it is our own).
        self._git(["clone", "--no-checkout", f"--separate-git-dir={git_dir}", "--", source, str(work_dir)],
                  work_dir.parent, None, source, log, control, local or source != clone_url, codehost)
        if source != clone_url:
            # Objects came from the mirror (hard links); later fetches go to the repository itself.
            self._git(["remote", "set-url", "origin", "--", clone_url], work_dir, git_dir, clone_url, log, control,
                      local, codehost)
        self.checkout(clone_url, branch, sha, work_dir, git_dir, log, control, local, codehost)

    def remote_head(self, clone_url: str, codehost: str | None) -> tuple[str, str]:
        """The default branch of the repository at `clone_url` and its head commit, as the remote's HEAD says
        (`git ls-remote --symref`: one request, no API call, no clone; a renamed default branch is seen too).
        CloneRefused, CommandFailed, or ValueError for an answer that does not name both."""
        if problem := clone_url_problem(clone_url, self._protocols):
            raise CloneRefused(problem)
        output = run(["git", *HARDENED, "ls-remote", "--symref", "--", clone_url, "HEAD"], cwd=None,
                     env=self._environment(clone_url, False, codehost), timeout=self._timeout, log=None)
        branch = sha = None
        for line in output.splitlines():
            value, _, name = line.partition("\t")
            if name == "HEAD" and value.startswith("ref: refs/heads/"):
                branch = value.removeprefix("ref: refs/heads/")
            elif name == "HEAD":
                sha = value
        if branch is None or branch_problem(branch) or sha is None or not SHA_PATTERN.fullmatch(sha):
            raise ValueError(f"{clone_url}: the remote's HEAD names no branch and commit ({output[:200]!r})")
        return branch, sha

    def changed_since(self, clone_url: str, base: str, work_dir: Path, git_dir: Path, log: DeploymentLog,
                      control: FlowControl | None = None, local: bool = False, codehost: str | None = None
                      ) -> list[str]:
        """The paths the checked-out commit changes since it left the branch `base` (a pull request's diff: from
        their merge base), fetched first; CommandFailed when git cannot tell."""
        def git(*args: str) -> str:
            return self._git(list(args), work_dir, git_dir, clone_url, log, control, local, codehost)

        git("fetch", "origin", "--", f"+refs/heads/{base}:refs/remotes/origin/{base}")
        fork_point = git("merge-base", "HEAD", f"refs/remotes/origin/{base}").strip()
        return [path for path in git("diff", "--name-only", "-z", fork_point, "HEAD").split("\0") if path]

    def checkout(self, clone_url: str, branch: str, sha: str, work_dir: Path, git_dir: Path, log: DeploymentLog,
                 control: FlowControl | None = None, local: bool = False, codehost: str | None = None,
                 fetch: bool = True) -> None:
        """Fetch the branch (and the commit, if the branch moved on), check it out, hard-reset to `sha`.
        `fetch=False`: a commit the checkout already holds (a restart); CommandFailed when it does not."""
        def git(*args: str) -> str:
            return self._git(list(args), work_dir, git_dir, clone_url, log, control, local, codehost)

        if fetch:
            git("fetch", "--prune", "origin", "--", f"+refs/heads/{branch}:refs/remotes/origin/{branch}")
        try:
            git("cat-file", "-e", f"{sha}^{{commit}}")
        except CommandFailed:
            if not fetch:
                raise
            git("fetch", "origin", "--", sha)
        git("checkout", "--force", "-B", branch, sha)
        git("reset", "--hard", sha)
        # Leftovers of the previous render (injected Dockerfile, generated compose files) go too.
        git("clean", "-fdx", "--quiet")
