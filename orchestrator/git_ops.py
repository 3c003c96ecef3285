"""Cloning and updating a pull request's checkout with git, as argument lists.

The code host token reaches git only through GIT_CONFIG_* environment variables of that one git process
(an `http.extraHeader`), never the URL, a file, argv or the log — and only for clone URLs on the code host.
"""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.commands import CommandFailed, DeploymentLog, clean_env, run


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


def token_applies(clone_url: str, api_url: str) -> bool:
    """Send the token only to the code host itself (github.com for api.github.com; the same host for GHE),
    over the API's own scheme."""
    clone, api = urlsplit(clone_url), urlsplit(api_url)
    if clone.scheme not in ("https", "http") or clone.scheme != api.scheme or not clone.hostname or not api.hostname:
        return False
    if clone.port != api.port:
        return False
    api_host = api.hostname.lower()
    web_host = api_host.removeprefix("api.")
    return clone.hostname.lower() in (api_host, web_host)


class Git:
    def __init__(self, token: str, api_url: str, allowed_protocols: tuple[str, ...], timeout: float,
                 home: Path) -> None:
        self._token = token
        self._api_url = api_url
        self._protocols = allowed_protocols
        self._timeout = timeout
        self._home = home

    def _env(self, clone_url: str) -> dict[str, str]:
        extra = {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_ALLOW_PROTOCOL": ":".join(self._protocols),
        }
        if self._token and token_applies(clone_url, self._api_url):
            basic = base64.b64encode(f"x-access-token:{self._token}".encode()).decode()
            extra.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                          "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"})
        return clean_env(extra, home=self._home)

    def _git(self, args: list[str], cwd: Path | None, clone_url: str, log: DeploymentLog) -> str:
        return run(["git", *args], cwd=cwd, env=self._env(clone_url), timeout=self._timeout, log=log)

    def clone(self, clone_url: str, branch: str, sha: str, work_dir: Path, log: DeploymentLog) -> None:
        problem = clone_url_problem(clone_url, self._protocols)
        if problem:
            raise CloneRefused(problem)
        work_dir.parent.mkdir(parents=True, exist_ok=True)
        self._git(["clone", "--no-checkout", "--", clone_url, str(work_dir)], None, clone_url, log)
        self.checkout(clone_url, branch, sha, work_dir, log)

    def checkout(self, clone_url: str, branch: str, sha: str, work_dir: Path, log: DeploymentLog) -> None:
        """Fetch the branch (and the commit, if the branch moved on), check it out, hard-reset to `sha`."""
        self._git(["fetch", "--prune", "origin", "--", f"+refs/heads/{branch}:refs/remotes/origin/{branch}"],
                  work_dir, clone_url, log)
        has_commit = self._has(work_dir, sha, clone_url, log)
        if not has_commit:
            self._git(["fetch", "origin", "--", sha], work_dir, clone_url, log)
        self._git(["checkout", "--force", "-B", branch, sha], work_dir, clone_url, log)
        self._git(["reset", "--hard", sha], work_dir, clone_url, log)
        # Leftovers of the previous render (injected Dockerfile, generated compose files) go too.
        self._git(["clean", "-fdx", "--quiet"], work_dir, clone_url, log)

    def _has(self, work_dir: Path, sha: str, clone_url: str, log: DeploymentLog) -> bool:
        try:
            self._git(["cat-file", "-e", f"{sha}^{{commit}}"], work_dir, clone_url, log)
            return True
        except CommandFailed:
            return False
