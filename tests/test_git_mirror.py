"""The per-repository mirror: a second pull request clones from it, repositories never share one, a
force-push is followed, and a broken mirror is rebuilt without failing the clone."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.adapters.git import Git
from orchestrator.adapters.git_mirror import Mirrors
from orchestrator.common.commands import DeploymentLog
from orchestrator.common.host_env import HostEnv
from tests.support.codehosts import clone_credentials
from tests.support.git_repos import PullRequestRepo, git, make_pr_repo

TOKEN = "ghs_mirror_token_never_on_disk"


def tool(tmp_path: Path) -> Git:
    return Git(clone_credentials(TOKEN, "https://api.github.com"), ("file",), 60, HostEnv.for_state_dir(tmp_path),
               Mirrors(tmp_path / "state" / "mirrors"))


def clone(git_tool: Git, repo: PullRequestRepo, sha: str, work: Path, name: str = "acme-api") -> DeploymentLog:
    log = DeploymentLog(work.with_suffix(".log"))
    git_tool.clone(repo.clone_url, repo.branch, sha, work, work.with_name(work.name + ".git"), log, mirror=name)
    return log


def has_object(git_dir: Path, sha: str) -> bool:
    return subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True, timeout=30).returncode == 0


def test_a_second_pull_request_clones_from_the_mirror_and_keeps_the_repository_as_origin(tmp_path: Path) -> None:
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/one")
    git_tool = tool(tmp_path)
    clone(git_tool, repo, repo.sha_a, tmp_path / "pr-1")
    mirror = tmp_path / "state" / "mirrors" / "acme-api.git"
    assert has_object(mirror, repo.sha_b) and oct(mirror.stat().st_mode & 0o777) == "0o700"
    log = clone(git_tool, repo, repo.sha_b, tmp_path / "pr-2")
    assert f"clone --no-checkout --separate-git-dir={tmp_path / 'pr-2.git'} -- {mirror}" in log.path.read_text()
    assert (tmp_path / "pr-2" / "message.txt").read_text() == "commit B\n"
    assert git(tmp_path / "pr-2", "remote", "get-url", "origin") == repo.clone_url  # updates fetch from it
    for path in mirror.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes()


def test_repositories_never_share_a_mirror(tmp_path: Path) -> None:
    first = make_pr_repo(tmp_path / "one", "python", "feature/a")
    second = make_pr_repo(tmp_path / "two", "go", "feature/b")
    git_tool = tool(tmp_path)
    clone(git_tool, first, first.sha_a, tmp_path / "first", name="acme-one")
    clone(git_tool, second, second.sha_a, tmp_path / "second", name="acme-two")
    assert not has_object(tmp_path / "second.git", first.sha_a)
    assert not has_object(tmp_path / "state" / "mirrors" / "acme-two.git", first.sha_a)


def test_a_force_push_replaces_the_branch_in_the_mirror(tmp_path: Path) -> None:
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/force")
    git_tool = tool(tmp_path)
    clone(git_tool, repo, repo.sha_b, tmp_path / "pr-1")
    # The author rewrites the branch: commit A, then C instead of B, force-pushed.
    work = tmp_path / "rewrite"
    git(tmp_path, "clone", "-q", "-b", repo.branch, repo.clone_url, str(work))
    git(work, "reset", "-q", "--hard", repo.sha_a)
    (work / "message.txt").write_text("commit C\n")
    git(work, "commit", "-qam", "commit C")
    sha_c = git(work, "rev-parse", "HEAD")
    git(work, "push", "-q", "--force", "origin", f"HEAD:{repo.branch}")
    clone(git_tool, repo, sha_c, tmp_path / "pr-2")
    assert (tmp_path / "pr-2" / "message.txt").read_text() == "commit C\n"
    assert git(tmp_path / "state" / "mirrors" / "acme-api.git", "rev-parse", repo.branch) == sha_c


def test_a_broken_mirror_is_removed_the_clone_still_works_and_the_next_one_rebuilds_it(tmp_path: Path) -> None:
    repo = make_pr_repo(tmp_path / "repos", "python", "feature/broken")
    git_tool = tool(tmp_path)
    clone(git_tool, repo, repo.sha_a, tmp_path / "pr-1")
    mirror = tmp_path / "state" / "mirrors" / "acme-api.git"
    for pack in (mirror / "objects").rglob("*"):
        if pack.is_file():
            pack.write_bytes(b"not a git object")
    (mirror / "refs" / "heads" / "feature" / "broken").write_text("not a sha\n")
    log = clone(git_tool, repo, repo.sha_b, tmp_path / "pr-2")
    assert (tmp_path / "pr-2" / "message.txt").read_text() == "commit B\n"
    assert f"-- {repo.clone_url} {tmp_path / 'pr-2'}" in log.path.read_text()  # straight from the repository
    clone(git_tool, repo, repo.sha_b, tmp_path / "pr-3")
    assert has_object(mirror, repo.sha_b)  # rebuilt


def test_mirrors_of_the_old_layout_are_removed_keyed_ones_kept(tmp_path: Path) -> None:
    from orchestrator.common.naming import mirror_name, repository_identity

    repo = make_pr_repo(tmp_path / "repos", "python", "feature/one")
    git_tool = tool(tmp_path)
    keyed = mirror_name("acme-web-app", repository_identity("github", "acme", "web-app"))
    clone(git_tool, repo, repo.sha_a, tmp_path / "pr-1", name=keyed)
    clone(git_tool, repo, repo.sha_a, tmp_path / "pr-2", name="acme-web-app")  # as before: keyed by slug alone
    mirrors = tmp_path / "state" / "mirrors"
    assert (mirrors / "acme-web-app.git").is_dir() and (mirrors / f"{keyed}.git").is_dir()
    assert git_tool.remove_unkeyed_mirrors() == ["acme-web-app.git"]
    assert not (mirrors / "acme-web-app.git").exists() and has_object(mirrors / f"{keyed}.git", repo.sha_a)
    assert git_tool.remove_unkeyed_mirrors() == []
