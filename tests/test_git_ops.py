"""git with real repositories: clone/checkout/reset, refused transports, and the token kept out of band."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.adapters.git import CloneRefused, Git
from orchestrator.codehosts.github import token_applies
from orchestrator.common.commands import CommandFailed, DeploymentLog
from orchestrator.common.host_env import HostEnv
from tests.support.codehosts import clone_credentials
from tests.support.git_repos import git, make_pr_repo

TOKEN = "ghs_supersecrettoken123"


def test_clone_checks_out_the_branch_at_the_sha_and_updates(tmp_path: Path) -> None:
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/x")
    tool = Git(clone_credentials(TOKEN, "https://api.github.com"), ("file",), 60, HostEnv.for_state_dir(tmp_path))
    log = DeploymentLog(tmp_path / "deploy.log")
    work = tmp_path / "work"
    tool.clone(repo.clone_url, repo.branch, repo.sha_a, work, tmp_path / "work.git", log)
    assert (work / "message.txt").read_text() == "commit A\n"
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD") == "feature/x"
    assert (work / ".git").is_file() and not (work / ".git" / "config").exists()  # the git directory is beside
    (work / "Dockerfile.preview-orchestrator").write_text("left over")
    tool.checkout(repo.clone_url, repo.branch, repo.sha_b, work, tmp_path / "work.git", log)
    assert (work / "message.txt").read_text() == "commit B\n"
    assert not (work / "Dockerfile.preview-orchestrator").exists()  # untracked leftovers are cleaned
    assert TOKEN not in log.path.read_text()  # a file:// clone never gets the token


@pytest.mark.parametrize("url", ["https://github.com/a/b.git", "ext::sh -c touch% /tmp/pwned", "-uhelp"])
def test_transports_outside_the_allowed_list_are_refused(tmp_path: Path, url: str) -> None:
    tool = Git(clone_credentials("", "https://api.github.com"), ("file",), 60, HostEnv.for_state_dir(tmp_path))
    with pytest.raises(CloneRefused):
        tool.clone(url, "main", "a" * 40, tmp_path / "work", tmp_path / "work.git", DeploymentLog(tmp_path / "log"))
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("clone", "api", "applies"),
    [
        ("https://github.com/acme/api.git", "https://api.github.com", True),
        ("https://api.github.com/acme/api.git", "https://api.github.com", True),
        ("https://ghe.corp.test/acme/api.git", "https://ghe.corp.test/api/v3", True),
        ("https://evil.test/acme/api.git", "https://api.github.com", False),
        ("http://github.com/acme/api.git", "https://api.github.com", False),
        ("/srv/git/api.git", "https://api.github.com", False),
    ],
)
def test_token_goes_only_to_the_code_host(clone: str, api: str, applies: bool) -> None:
    assert token_applies(clone, api) is applies


@pytest.fixture
def git_http() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            seen.append({"path": self.path, "authorization": self.headers.get("Authorization", "")})
            self.send_response(404)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_private_clone_sends_the_token_as_a_header_never_in_url_argv_or_log(tmp_path: Path, git_http) -> None:
    base, seen = git_http
    tool = Git(clone_credentials(TOKEN, base), ("http",), 60, HostEnv.for_state_dir(tmp_path))
    log = DeploymentLog(tmp_path / "deploy.log")
    with pytest.raises(CommandFailed) as failed:
        tool.clone(f"{base}/acme/private.git", "main", "a" * 40, tmp_path / "work", tmp_path / "work.git", log,
                   codehost="github")
    expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert seen and seen[0]["authorization"] == expected
    assert all(TOKEN not in request["path"] for request in seen)
    assert TOKEN not in " ".join(failed.value.argv)
    assert TOKEN not in log.path.read_text() and TOKEN not in failed.value.output
    assert not list(tmp_path.rglob("config")) or all(TOKEN not in p.read_text() for p in tmp_path.rglob("config"))


def test_other_hosts_never_see_the_token(tmp_path: Path, git_http) -> None:
    base, seen = git_http
    # GitHub and Gitea are on, both elsewhere: neither token goes to this host
    credentials = clone_credentials(TOKEN, "http://127.0.0.1:1", "http://127.0.0.1:2", "gitea-token-7")
    tool = Git(credentials, ("http",), 60, HostEnv.for_state_dir(tmp_path))
    for codehost in ("github", "gitea"):
        with pytest.raises(CommandFailed):
            tool.clone(f"{base}/acme/api.git", "main", "a" * 40, tmp_path / codehost, tmp_path / f"{codehost}.git",
                       DeploymentLog(tmp_path / "l"), codehost=codehost)
    assert seen and all(request["authorization"] == "" for request in seen)


def test_a_gitea_clone_gets_the_gitea_token_and_github_s_never(tmp_path: Path, git_http) -> None:
    base, seen = git_http
    tool = Git(clone_credentials(TOKEN, "https://api.github.com", base, "gitea-token-7"), ("http",), 60,
               HostEnv.for_state_dir(tmp_path))
    with pytest.raises(CommandFailed):
        tool.clone(f"{base}/acme/api.git", "main", "a" * 40, tmp_path / "work", tmp_path / "work.git",
                   DeploymentLog(tmp_path / "l"), codehost="gitea")
    assert seen and {request["authorization"] for request in seen} == {
        "Basic " + base64.b64encode(b"x-access-token:gitea-token-7").decode()}
    # the same URL named by a GitHub pull request gets no token at all: only the pull request's host is asked
    seen.clear()
    with pytest.raises(CommandFailed):
        tool.clone(f"{base}/acme/api.git", "main", "a" * 40, tmp_path / "other", tmp_path / "other.git",
                   DeploymentLog(tmp_path / "l"), codehost="github")
    assert seen and all(request["authorization"] == "" for request in seen)


def test_shell_characters_in_branch_names_are_only_data(tmp_path: Path) -> None:
    branch = "feat/$(touch${IFS}pwned);`touch${IFS}pwned2`&x"
    repo = make_pr_repo(tmp_path / "repos", "python", "plain")
    git(Path(repo.clone_url), "branch", branch, repo.sha_b)
    tool = Git(clone_credentials("", "https://api.github.com"), ("file",), 60, HostEnv.for_state_dir(tmp_path))
    work = tmp_path / "work"
    tool.clone(repo.clone_url, branch, repo.sha_b, work, tmp_path / "work.git", DeploymentLog(tmp_path / "log"))
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD") == branch
    assert not list(tmp_path.rglob("pwned*")) and not Path("pwned").exists()


def test_nothing_written_into_a_checkout_or_its_git_directory_makes_git_run_a_program(tmp_path: Path) -> None:
    """What a container could write into a checkout it can see (a `.git` file pointing at a git directory of its
    own, with hooks and `core.fsmonitor`), and what is in the service's own git directory, runs nothing."""
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/hooks")
    tool = Git(clone_credentials("", "https://api.github.com"), ("file",), 60, HostEnv.for_state_dir(tmp_path))
    work, git_dir, log = tmp_path / "work", tmp_path / "work.git", DeploymentLog(tmp_path / "log")
    tool.clone(repo.clone_url, repo.branch, repo.sha_a, work, git_dir, log)
    canary = tmp_path / "pwned"
    payload = f"#!/bin/sh\ntouch {canary}\n"
    evil = tmp_path / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(evil))
    for directory in (evil / "hooks", git_dir / "hooks"):
        for hook in ("post-checkout", "pre-commit", "reference-transaction", "post-merge", "fsmonitor"):
            (directory / hook).write_text(payload)
            (directory / hook).chmod(0o755)
    for config in (evil / "config", git_dir / "config"):
        with config.open("a") as handle:
            handle.write(f"[core]\n\tfsmonitor = {evil / 'hooks' / 'fsmonitor'}\n\thooksPath = {evil / 'hooks'}\n")
    (work / ".git").write_text(f"gitdir: {evil}\n")
    tool.checkout(repo.clone_url, repo.branch, repo.sha_b, work, git_dir, log)
    assert (work / "message.txt").read_text() == "commit B\n"
    assert not canary.exists()
