"""The hostile corpus, deployed for real: pull requests whose files try to reach the host, another preview or
the service itself. Each is a repository the service clones, judges and (where it gets that far) builds and
runs with the real Docker engine, compose v2 and nginx. After each: nothing outside the work directory was
created, changed or mounted; no process of theirs is left; the victim preview's record, network, volume and
page are untouched."""

from __future__ import annotations

import hashlib
import json
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.adapters.build_commands import BUILD_ROLE
from orchestrator.adapters.leftovers import marked_processes
from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import ROLE_LABEL
from tests.support import web
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import wait_until
from tests.support.repos import config_for
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live]

VICTIM = 80
TWIN = "Codertocat/Hello_World"  # a different repository whose slug is also codertocat-hello-world
PLAIN_DOCKERFILE = ("FROM po-standin/python:test\nWORKDIR /app\nCOPY . .\nUSER 10001:10001\n"
                    "CMD [\"python3\", \"app.py\"]\n")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("hostile"), ALLOWED_REPOS=f"Codertocat/Hello-World,{TWIN}",
                          BUILD_COMMAND_TIMEOUT_SECONDS="8", MAX_CONCURRENT_PREVIEWS="40")
    (running.root / "outside").mkdir()
    (running.root / "outside" / "existing.conf").write_text("the operator's file\n")
    yield running
    stop_stack(running)


@pytest.fixture(scope="module")
def victim(stack: Stack) -> PullRequestRepo:
    """A running preview every hostile pull request would like to reach."""
    repo = make_pr_repo(stack.root / "repos", "python", "victim", config=config_for("python"))
    stack.send("opened", VICTIM, repo, repo.sha_a)
    stack.wait_for(VICTIM, "running", repo.sha_a)
    stack.wait_page(VICTIM, "python says: commit A\n")
    return repo


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def tree_digest(root: Path) -> str:
    """Every path, link target and file content under `root`."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_symlink():
            digest.update(b"->" + str(path.readlink()).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


class Witness:
    """What must not change while a hostile pull request is handled."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.outside = tree_digest(stack.root / "outside")
        self.state = {name: (stack.root / "state" / name).read_bytes()
                      for name in ("db-password.key",)}
        self.victim = stack.records()[f"{SLUG}-{VICTIM}"]
        self.volumes = docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={SLUG}-{VICTIM}")
        self.networks = docker("network", "ls", "-q", "--filter",
                               f"label=com.docker.compose.project={SLUG}-{VICTIM}")
        self.standin = docker("image", "inspect", "-f", "{{.Id}}", "po-standin/python:test")
        self.image = docker("inspect", "-f", "{{.Image}}", f"{SLUG}-pr-{VICTIM}-app")  # what the victim runs
        self.git = tree_digest(stack.root / "deployments" / SLUG / f"pr-{VICTIM}.git")  # its objects and refs

    def check(self) -> None:
        stack = self.stack
        assert tree_digest(stack.root / "outside") == self.outside, "something outside the work directory changed"
        assert self.state == {name: (stack.root / "state" / name).read_bytes() for name in self.state}
        assert stack.records()[f"{SLUG}-{VICTIM}"] == self.victim
        project = f"label=com.docker.compose.project={SLUG}-{VICTIM}"
        assert docker("volume", "ls", "-q", "--filter", project) == self.volumes
        assert docker("network", "ls", "-q", "--filter", project) == self.networks
        assert docker("image", "inspect", "-f", "{{.Id}}", "po-standin/python:test") == self.standin
        assert docker("inspect", "-f", "{{.Image}}", f"{SLUG}-pr-{VICTIM}-app") == self.image
        assert tree_digest(stack.root / "deployments" / SLUG / f"pr-{VICTIM}.git") == self.git
        assert stack.page(VICTIM).text == "python says: commit A\n"
        assert_no_leftover_processes(stack)


def assert_no_leftover_processes(stack: Stack) -> None:
    marker = HostEnv.for_state_dir(stack.root / "state").marker
    wait_until(lambda: not marked_processes(marker), timeout=20, message="no command of the service left running")
    assert docker("ps", "-aq", "--filter", f"label={ROLE_LABEL}={BUILD_ROLE}") == ""


def mounts(container: str) -> list[dict]:
    return json.loads(docker("inspect", "-f", "{{json .Mounts}}", container))


COMPOSE_CASES = {
    # compose interpolates in a clean environment: each default below is what compose would really run
    "bind-of-root-through-a-default": ("services:\n  app:\n    build: .\n    volumes: ['${R:-/}:/host']\n",
                                       "volumes: bind mount of / is not allowed"),
    "host-pid-through-a-default": ("services:\n  app:\n    build: .\n    pid: \"${P:-host}\"\n",
                                   "pid: host is not allowed"),
    "host-network-for-the-build": ("services:\n  app:\n    build: {context: ., network: \"${N:-host}\"}\n",
                                   "build network host is not allowed"),
    "ssh-agent-for-the-build": ("services:\n  app:\n    build: {context: ., ssh: [default]}\n",
                                "build ssh is not allowed"),
    "privileged-build": ("services:\n  app:\n    build: {context: ., privileged: true}\n",
                         "build privileged is not allowed"),
    "context-outside-through-a-default": ("services:\n  app:\n    build: \"${C:-../..}\"\n",
                                          "build context must be a directory of the repository"),
    "url-context": ("services:\n  app:\n    build: https://github.com/Codertocat/Hello-World.git\n",
                    "build context must be a directory of the repository"),
    "join-the-victims-network": (f"services:\n  app:\n    build: .\nnetworks:\n  default:\n"
                                 f"    name: {SLUG}-{VICTIM}_default\n",
                                 f"networks default: name {SLUG}-{VICTIM}_default is not allowed"),
    "mount-the-victims-database": (f"services:\n  app:\n    build: .\n    volumes: ['data:/data']\nvolumes:\n"
                                   f"  data:\n    name: {SLUG}-{VICTIM}_db-data\n",
                                   f"volumes data: name {SLUG}-{VICTIM}_db-data is not allowed"),
    "retag-a-shared-image": ("services:\n  app:\n    build: .\n    image: po-standin/python:test\n",
                             "image beside build is not allowed"),
    "build-on-the-built-images": ("services:\n  app:\n    build: {context: ., args: {BASE: po-build/0a1b-app}}\n",
                                  "build may not name po-build/"),
    "multiply-the-cpu-cap": ("services:\n  app:\n    build: .\n    deploy: {replicas: 6}\n",
                             "deploy replicas 6 is not allowed"),
    "read-a-host-file-as-env": ("services:\n  app:\n    build: .\n    env_file: ['${E:-/etc/shadow}']\n",
                                "env_file must be a literal path"),
    "writable-bind-of-the-checkout": ("services:\n  app:\n    build: .\n    volumes: ['.:/app']\n",
                                      "bind mount of . must be read-only"),
}


@pytest.mark.parametrize("case", list(COMPOSE_CASES))
def test_hostile_compose_files_are_refused_in_the_form_compose_runs(stack: Stack, victim: PullRequestRepo,
                                                                    case: str) -> None:
    pr = 81 + list(COMPOSE_CASES).index(case)
    compose, message = COMPOSE_CASES[case]
    witness = Witness(stack)
    repo = make_pr_repo(stack.root / "repos", "python", f"hostile/{case}", config=config_for("python"),
                        files={"compose.preview.yml": compose, "Dockerfile": PLAIN_DOCKERFILE})
    stack.send("opened", pr, repo, repo.sha_a)
    record = stack.wait_for(pr, "failed")
    assert message in record["error"], record["error"]
    stack.wait_comment(pr, "Preview failed", message)
    assert docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={SLUG}-{pr}") == ""
    witness.check()
    stack.close(pr, repo, repo.sha_a)


def test_symlinks_in_the_repository_are_never_written_through_or_read(stack: Stack, victim: PullRequestRepo) -> None:
    outside = stack.root / "outside"
    cases = {
        # a dangling link where the generated compose file is written
        "compose.preview.yml": outside / "cron.d-x",
        # links where the injected Dockerfile and the generated compose file go, onto an existing file
        "Dockerfile.preview-orchestrator": outside / "existing.conf",
        "compose.preview.generated.yml": outside / "existing.conf",
        # a link read as an env_file or a bind source
        "secrets.env": outside / "existing.conf",
    }
    for offset, (name, target) in enumerate(cases.items()):
        pr = 100 + offset
        witness = Witness(stack)
        repo = make_pr_repo(stack.root / "repos", "python", f"links/{offset}", config=config_for("python"),
                            links={name: str(target)})
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "failed")
        assert record["error"].startswith("The repository contains symbolic links that point outside it: ")
        assert name in record["error"]
        assert not (outside / "cron.d-x").exists()
        assert (outside / "existing.conf").read_text() == "the operator's file\n"
        witness.check()
        stack.close(pr, repo, repo.sha_a)


def test_what_a_container_or_build_command_writes_into_the_checkout_runs_nothing_on_the_host(
        stack: Stack, victim: PullRequestRepo) -> None:
    """A build command writes a `.git` file pointing at a git directory of its own, with a hook and
    `core.fsmonitor`; the next push checks out with git as root: nothing of it runs. A compose bind of the
    checkout is read-only, so the running app cannot change it at all."""
    pr = 110
    work = stack.root / "deployments" / SLUG / f"pr-{pr}"
    canary = stack.root / "outside" / "pwned-by-git"
    evil = work / "evil"
    plant = (f"mkdir -p evil/hooks evil/objects evil/refs/heads && echo 'ref: refs/heads/main' > evil/HEAD && "
             f"printf '#!/bin/sh\\ntouch {canary}\\n' > evil/hooks/post-checkout && chmod +x evil/hooks/post-checkout"
             f" && cp evil/hooks/post-checkout evil/hooks/fsmonitor && printf '[core]\\n\\trepositoryformatversion = 0"
             f"\\n\\tfsmonitor = {evil}/hooks/fsmonitor\\n\\thooksPath = {evil}/hooks\\n' > evil/config && "
             f"printf 'gitdir: {evil}\\n' > .git")
    compose = ("services:\n  app:\n    build: .\n    volumes: ['.:/checkout:ro']\n"
               "    command: ['sh', '-c', 'touch /checkout/.git 2>/dev/null && echo WROTE > /tmp/wrote; "
               "exec python3 app.py']\n")
    repo = make_pr_repo(stack.root / "repos", "python", "hostile/git", config=config_for("python",
                        build_commands=[plant]), files={"compose.preview.yml": compose, "Dockerfile": PLAIN_DOCKERFILE})
    witness = Witness(stack)
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    assert (work / ".git").read_text() == f"gitdir: {evil}\n"  # the build command did write it
    [checkout_mount] = [m for m in mounts(f"{SLUG}-pr-{pr}-app") if m["Destination"] == "/checkout"]
    assert checkout_mount["RW"] is False
    assert subprocess.run(["docker", "exec", f"{SLUG}-pr-{pr}-app", "test", "-e", "/tmp/wrote"],
                          timeout=30).returncode != 0  # the app could not write into the checkout
    stack.send("synchronize", pr, repo, repo.sha_b)
    stack.wait_for(pr, "running", repo.sha_b)
    stack.wait_page(pr, "python says: commit B\n")
    assert not canary.exists()
    witness.check()
    stack.close(pr, repo, repo.sha_b)


def test_build_commands_run_in_a_throwaway_container_that_sees_only_the_checkout(
        stack: Stack, victim: PullRequestRepo) -> None:
    pr = 111
    state = stack.root / "state"
    probe = (f"test ! -e {state} && test ! -e /var/run/docker.sock && test ! -e {stack.root / 'outside'} && "
             "env > seen-env.txt && (sleep 331 &) && echo probe-done")
    repo = make_pr_repo(stack.root / "repos", "python", "hostile/build-env",
                        config=config_for("python", build_commands=[probe]))
    witness = Witness(stack)
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    seen = (stack.root / "deployments" / SLUG / f"pr-{pr}" / "seen-env.txt").read_text()
    for secret in ("test-webhook-secret-5f1c", "live-test-token-8d2e", "CODEHOST", "PREVIEW_ORCHESTRATOR"):
        assert secret not in seen
    assert "HOME=/tmp" in seen
    assert "probe-done" in stack.logs(pr)
    assert not any("sleep 331" in line for line in _process_lines())  # the background child went with it
    witness.check()
    stack.close(pr, repo, repo.sha_a)


def test_a_build_command_that_outlives_its_timeout_leaves_nothing_running(stack: Stack,
                                                                           victim: PullRequestRepo) -> None:
    pr = 112
    # durations of this run's own: another run on the machine may have its sleeps, this one finds only its own
    mark = f"34{time.time_ns() % 10**5:05d}"
    command = f"sleep {mark}1 & sleep {mark}2"
    repo = make_pr_repo(stack.root / "repos", "python", "hostile/timeout",
                        config=config_for("python", build_commands=[command]))
    witness = Witness(stack)
    stack.send("opened", pr, repo, repo.sha_a)
    record = stack.wait_for(pr, "failed")
    assert record["error"] == f"Build command failed: {command}"
    assert "timed out after 8s" in stack.logs(pr)
    assert not any(f"sleep {mark}" in line for line in _process_lines())
    witness.check()
    stack.close(pr, repo, repo.sha_a)


def test_closed_and_delete_stop_a_running_build_at_once(stack: Stack, victim: PullRequestRepo) -> None:
    for pr, how in ((113, "closed"), (114, "DELETE")):
        repo = make_pr_repo(stack.root / "repos", "python", f"hostile/slow-{how}",
                            config=config_for("python", build_commands=["sleep 90"]))
        witness = Witness(stack)
        stack.send("opened", pr, repo, repo.sha_a)
        wait_until(lambda pr=pr: "$ sh -c sleep 90" in stack.logs(pr), timeout=60, message="building")
        started = time.monotonic()
        if how == "closed":
            stack.send("closed", pr, repo, repo.sha_a)
            stack.wait_gone(pr)
        else:
            response = web.delete(f"{stack.service.url}/api/previews/{SLUG}-{pr}", timeout=60)
            assert response.status_code == 200, response.text
        assert time.monotonic() - started < 45  # long before the build command's 90 s would have ended
        witness.check()
        assert_fully_removed(stack, pr)


def test_a_repository_whose_name_gives_the_same_slug_cannot_touch_the_preview(stack: Stack,
                                                                              victim: PullRequestRepo) -> None:
    witness = Witness(stack)
    twin = make_pr_repo(stack.root / "repos", "python", "twin", config=config_for("python"))
    for action in ("opened", "synchronize", "closed"):
        response = stack.send(action, VICTIM, twin, twin.sha_a, expect=409, repository=TWIN)
        assert response.json()["error"] == (
            f"Deployment {SLUG}-{VICTIM} belongs to the repository Codertocat/Hello-World; another repository "
            "whose name gives the same deployment id cannot use it")
    witness.check()


def test_another_preview_s_built_image_can_neither_be_run_nor_copied(stack: Stack, victim: PullRequestRepo) -> None:
    """Compose would name the victim's image `{deployment id}-app`, which anyone can derive; the service names it
    by a keyed digest (docs/security.md, "Between previews"). Each pull request below tries to run or build on
    the victim's built code: by compose's public name (no such image: its deploy fails, nothing runs it), and by
    the real name, were it ever leaked (refused before anything is built)."""
    witness = Witness(stack)
    built = docker("inspect", "-f", "{{.Config.Image}}", f"{SLUG}-pr-{VICTIM}-app")
    victim_image = docker("image", "inspect", "-f", "{{.Id}}", built)
    assert built.startswith("po-build/") and f"{SLUG}-{VICTIM}" not in built
    public = f"{SLUG}-{VICTIM}-app"
    attempts = {
        130: ({"compose.preview.yml": f"services:\n  app:\n    image: {public}\n    pull_policy: never\n"}, None),
        131: ({"Dockerfile": f"FROM {public}\nCMD [\"python3\", \"app.py\"]\n"}, None),
        132: ({"Dockerfile": f"FROM po-standin/python:test\nCOPY --from={built} /app /stolen\n" + PLAIN_DOCKERFILE},
              "Dockerfile may not name po-build/"),
        133: ({"compose.preview.yml": f"services:\n  app:\n    image: {built}\n    pull_policy: never\n"},
              f"image {built} is not allowed"),
    }
    for pr, (files, message) in attempts.items():
        repo = make_pr_repo(stack.root / "repos", "python", f"hostile/image-{pr}", config=config_for("python"),
                            files=files)
        stack.send("opened", pr, repo, repo.sha_a)
        record = stack.wait_for(pr, "failed")
        if message is not None:
            assert message in record["error"], record["error"]
        ran = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={SLUG}-{pr}",
                     "--filter", f"ancestor={victim_image}")
        assert ran == "", f"PR {pr} ran the victim's image"
        assert docker("image", "ls", "-q", "--filter", f"label=com.docker.compose.project={SLUG}-{pr}") == ""
        stack.close(pr, repo, repo.sha_a)
    witness.check()
    assert docker("image", "inspect", "-f", "{{.Id}}", built) == victim_image  # untouched


def test_another_repository_s_build_cache_is_out_of_reach(stack: Stack) -> None:
    """BuildKit keeps a cache mount by its target (or id) for the whole engine. Through the service: the twin
    repository's pull request plants a file in a cache at a target; this repository's pull request that mounts the
    same target finds nothing, and the twin's next pull request finds what its first left (docs/security.md)."""
    target = f"/var/cache/po-e2e-{time.time_ns()}"
    head, tail = PLAIN_DOCKERFILE.split("USER ", 1)
    plant = f"{head}RUN --mount=type=cache,target={target} sh -c 'echo planted > {target}/note'\nUSER {tail}"
    read = (f"{head}RUN --mount=type=cache,target={target} \\\n    sh -c 'cat {target}/note > /app/seen 2>/dev/null "
            f"|| echo nothing > /app/seen'\nUSER {tail}")
    deploys = [(150, TWIN, plant), (151, None, read), (152, TWIN, read)]
    repos = {}
    for pr, repository, dockerfile in deploys:
        repos[pr] = make_pr_repo(stack.root / "repos", "python", f"cache/{pr}", config=config_for("python"),
                                 files={"Dockerfile": dockerfile})
        stack.send("opened", pr, repos[pr], repos[pr].sha_a, repository=repository)
        stack.wait_for(pr, "running", repos[pr].sha_a)
        assert (stack.root / "deployments" / SLUG / f"pr-{pr}.build" / "app.Dockerfile").is_file()
    assert docker("exec", f"{SLUG}-pr-151-app", "cat", "/app/seen") == "nothing"
    assert docker("exec", f"{SLUG}-pr-152-app", "cat", "/app/seen") == "planted"
    for pr, repository, _ in deploys:
        stack.send("closed", pr, repos[pr], repos[pr].sha_a, repository=repository)
        stack.wait_gone(pr)
        assert_fully_removed(stack, pr)  # the keyed Dockerfile's directory too


def test_a_cleanup_that_fails_keeps_the_record_until_everything_is_gone(stack: Stack,
                                                                         victim: PullRequestRepo) -> None:
    pr = 115
    repo = make_pr_repo(stack.root / "repos", "python", "hostile/stuck", config=config_for("python"))
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    [volume] = docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={SLUG}-{pr}").split()
    blocker = docker("run", "-d", "-v", f"{volume}:/held", "po-standin/base:test", "sleep", "300")
    try:
        response = web.delete(f"{stack.service.url}/api/previews/{SLUG}-{pr}", timeout=120)
        assert response.status_code == 500
        assert response.json()["error"].startswith("Cleanup incomplete: ")
        record = stack.records()[f"{SLUG}-{pr}"]
        assert record["status"] == "failed" and record["error"].startswith("Cleanup incomplete: ")
        assert f"{SLUG}-{pr}" in stack.store()["portAllocations"]
    finally:
        docker("rm", "--force", blocker)
    response = web.delete(f"{stack.service.url}/api/previews/{SLUG}-{pr}", timeout=120)
    assert response.status_code == 200, response.text
    assert_fully_removed(stack, pr)


def _process_lines() -> list[str]:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30,
                          check=True).stdout.splitlines()



@pytest.fixture
def host_mode_stack(tmp_path: Path) -> Iterator[Stack]:
    """BUILD_COMMANDS_MODE=host. The work directories must be reachable by the build user, so they live under
    /var/tmp (pytest's own temporary directories are private to root)."""
    reachable = Path(tempfile.mkdtemp(prefix="po-host-mode-", dir="/var/tmp"))
    reachable.chmod(0o711)
    (tmp_path / "deployments").symlink_to(reachable)
    running = start_stack(tmp_path, BUILD_COMMANDS_MODE="host")
    yield running
    stop_stack(running)
    shutil.rmtree(reachable, ignore_errors=True)


def test_host_mode_runs_build_commands_as_a_user_that_can_read_nothing_of_the_service(
        host_mode_stack: Stack) -> None:
    stack = host_mode_stack
    other = make_pr_repo(stack.root / "repos", "python", "host/other", config=config_for("python"))
    stack.send("opened", 120, other, other.sha_a)
    stack.wait_for(120, "running", other.sha_a)
    state = stack.root / "state"
    other_work = stack.root / "deployments" / SLUG / "pr-120"
    assert stack.service.process is not None
    probe = (f"id -u > uid.txt; cat {state / 'deployments.json'} > store.txt 2>&1; "
             f"cat {state / 'db-password.key'} > key.txt 2>&1; "
             f"cat /proc/{stack.service.process.pid}/environ > environ.txt 2>&1; "
             f"ls {other_work} > other.txt 2>&1; ls {other_work}.git > other-git.txt 2>&1; (sleep 351 &) ; "
             # a daemon in a session of its own, which the command's process group does not hold
             "setsid sleep 352 > /dev/null 2>&1 < /dev/null & true")
    repo = make_pr_repo(stack.root / "repos", "python", "host/probe",
                        config=config_for("python", build_commands=[probe]))
    stack.send("opened", 121, repo, repo.sha_a)
    stack.wait_for(121, "running", repo.sha_a)
    work = stack.root / "deployments" / SLUG / "pr-121"
    assert (work / "uid.txt").read_text().strip() == str(pwd.getpwnam("po-build").pw_uid)
    for name in ("store.txt", "key.txt", "environ.txt", "other.txt", "other-git.txt"):
        assert "Permission denied" in (work / name).read_text(), name
    assert work.stat().st_uid == 0 and (work / "uid.txt").stat().st_uid == 0  # handed back to root
    assert not any("sleep 351" in line or "sleep 352" in line for line in _process_lines())
    assert_no_leftover_processes(stack)
    stack.close(121, repo, repo.sha_a)
    stack.close(120, other, other.sha_a)
