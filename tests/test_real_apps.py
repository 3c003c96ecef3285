"""Real applications of every framework, built by the default Dockerfiles from their registries' real packages
where this network reaches them (npm, PyPI), and with what they bring along where it does not (Go's vendor/,
a Rust workspace with no crates, a Laravel-shaped app with no Composer packages). Each is deployed end to end
through nginx, writes and reads its database, survives a push with its data, and is removed on close.

The apps live in tests/real_apps/<name>; docs/plugins.md shows each one's preview-config.yml as written there.
All deploy at once (MAX_CONCURRENT_BUILDS=3), as pull requests of a busy repository would.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support import web
from tests.support.git_repos import PullRequestRepo, git
from tests.support.stack import SLUG, Stack, assert_fully_removed, start_stack, stop_stack

pytestmark = [pytest.mark.docker, pytest.mark.live]

REAL_APPS = Path(__file__).parent / "real_apps"
LIB_PQ = Path("/usr/share/gocode/src/github.com/lib/pq")  # Debian's golang-github-lib-pq-dev


@dataclass(frozen=True)
class App:
    name: str
    pr: int
    message: str  # the file that says "commit A" / "commit B"
    notes_body: str = "json"  # how /notes takes a note: a JSON object, or the text itself

    @property
    def plugins(self) -> set[str]:
        """The built-in framework and database plugins it runs on (its preview-config.yml)."""
        config = yaml.safe_load((REAL_APPS / self.name / "preview-config.yml").read_text())
        return {config["framework"], config["database"]}


APPS = [
    App("nestjs-typeorm", 200, "message.txt"),
    App("python-fastapi", 201, "message.txt"),
    App("python-django", 202, "message.txt"),
    App("go-service", 203, "cmd/server/message.txt"),
    App("rust-workspace", 204, "crates/server/message.txt", notes_body="text"),
    App("laravel-shaped", 205, "message.txt"),
    App("python-mongo", 206, "message.txt"),
]


# tox's fw-*/db-* environments (--plugin) run this module for the apps of their plugin only.
pytestmark.append(pytest.mark.uses(*sorted(set().union(*(app.plugins for app in APPS)))))


@pytest.fixture(scope="module")
def apps(request: pytest.FixtureRequest) -> list[App]:
    plugin = request.config.getoption("--plugin")
    return [app for app in APPS if not plugin or plugin in app.plugins]


def named(apps: list[App], name: str) -> App | None:
    return next((app for app in apps if app.name == name), None)


def vendor_lib_pq(work: Path) -> None:
    """What `go mod vendor` writes, from Debian's copy of lib/pq (the module proxy is out of reach here)."""
    target = work / "vendor" / "github.com" / "lib" / "pq"
    shutil.copytree(LIB_PQ, target, ignore=shutil.ignore_patterns("*_test.go", "auth", "example", "certs"))
    (work / "vendor" / "modules.txt").write_text(
        "# github.com/lib/pq v1.10.7\n## explicit; go 1.13\ngithub.com/lib/pq\ngithub.com/lib/pq/oid\n"
        "github.com/lib/pq/scram\n")


def app_repo(root: Path, app: App) -> PullRequestRepo:
    work = root / f"{app.name}-work"
    shutil.copytree(REAL_APPS / app.name, work)
    if app.name == "go-service":
        vendor_lib_pq(work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "commit A")
    sha_a = git(work, "rev-parse", "HEAD")
    (work / app.message).write_text("commit B\n")
    git(work, "commit", "-q", "-am", "commit B")
    sha_b = git(work, "rev-parse", "HEAD")
    bare = root / f"{app.name}.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "branch", "-m", "main", f"preview/{app.name}")
    return PullRequestRepo(clone_url=str(bare), branch=f"preview/{app.name}", sha_a=sha_a, sha_b=sha_b)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("real-apps"), MAX_CONCURRENT_BUILDS="3",
                          HEALTH_CHECK_TIMEOUT_SECONDS="120", MAX_CONCURRENT_PREVIEWS="20")
    yield running
    stop_stack(running)


@pytest.fixture(scope="module")
def repos(stack: Stack, apps: list[App]) -> dict[str, PullRequestRepo]:
    return {app.name: app_repo(stack.root / "repos", app) for app in apps}


def add_note(stack: Stack, app: App, text: str) -> httpx.Response:
    url = f"{stack.nginx.url}/{SLUG}/pr-{app.pr}/notes"
    if app.notes_body == "text":
        return web.post(url, content=text.encode(), timeout=30)
    return web.post(url, json={"text": text}, timeout=30)


def notes(stack: Stack, app: App) -> list[str]:
    response = stack.page(app.pr, "notes")
    assert response.status_code == 200, response.text
    return response.text.splitlines() if app.notes_body == "text" else json.loads(response.text)


def exec_in_app(app: App, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", f"{SLUG}-pr-{app.pr}-app", *argv], capture_output=True, text=True,
                          timeout=60)


def exists_in_app(app: App, flag: str, path: str) -> bool:
    """`test FLAG PATH` in the app's container; a `docker exec` that fails is a failure, not an answer."""
    result = exec_in_app(app, "sh", "-c", f'if test {flag} "$1"; then echo yes; else echo no; fi', "sh", path)
    assert result.returncode == 0 and result.stdout.strip() in ("yes", "no"), result
    return result.stdout.strip() == "yes"


def test_every_real_app_deploys_and_writes_and_reads_its_database(stack: Stack, repos: dict[str, PullRequestRepo],
                                                                   apps: list[App]) -> None:
    for app in apps:
        stack.send("opened", app.pr, repos[app.name], repos[app.name].sha_a)
    for app in apps:
        stack.wait_for(app.pr, "running", repos[app.name].sha_a)
    for app in apps:
        stack.wait_page(app.pr, f"{app.name} says: commit A\n" if app.name != "python-django"
                        else "python-django says: commit A; static collected: True\n")
        assert add_note(stack, app, f"first note of {app.name}").status_code in (200, 201)
        assert notes(stack, app) == [f"first note of {app.name}"]


def test_every_real_app_runs_as_a_non_root_user_that_can_write_where_its_framework_writes(stack: Stack,
                                                                                           apps: list[App]) -> None:
    for app in apps:
        uid = exec_in_app(app, "id", "-u").stdout.strip()
        assert uid not in ("", "0"), f"{app.name} runs as {uid!r}"
    if laravel := named(apps, "laravel-shaped"):
        assert "GET /notes" in exec_in_app(laravel, "cat", "storage/logs/laravel.log").stdout  # storage/ writable
        assert exists_in_app(laravel, "-s", "bootstrap/cache/config.php")
    if django := named(apps, "python-django"):
        assert exists_in_app(django, "-f", "staticfiles/notes/style.css")  # collectstatic ran
    if nestjs := named(apps, "nestjs-typeorm"):
        # .dockerignore is honoured, and the runtime image has no development dependencies left
        assert not exists_in_app(nestjs, "-e", "/app/local-notes.txt")
        assert exists_in_app(nestjs, "-d", "/app/node_modules/@nestjs/core")
        assert not exists_in_app(nestjs, "-e", "/app/node_modules/typescript")


def test_every_real_app_survives_a_push_with_its_data(stack: Stack, repos: dict[str, PullRequestRepo],
                                                     apps: list[App]) -> None:
    for app in apps:
        stack.send("synchronize", app.pr, repos[app.name], repos[app.name].sha_b)
    for app in apps:
        stack.wait_for(app.pr, "running", repos[app.name].sha_b)
    for app in apps:
        stack.wait_page(app.pr, f"{app.name} says: commit B\n" if app.name != "python-django"
                        else "python-django says: commit B; static collected: True\n")
        assert notes(stack, app) == [f"first note of {app.name}"]  # the database kept its data
    if nestjs := named(apps, "nestjs-typeorm"):
        # a change of code neither prunes nor copies the production dependencies again: their stage is cached
        log = stack.logs(nestjs.pr)
        for step_pattern in (r"\[(?:\S+ )?production-dependencies \S+\] RUN",
                             r"\[[^]]*\] COPY --from=production-dependencies"):
            steps = list(re.finditer(rf"(#\d+) {step_pattern}", log))
            assert steps, (step_pattern, log[-3000:])
            step = steps[-1]  # the push's build
            assert f"{step.group(1)} CACHED" in log[step.end():], log[step.start():][:3000]


def test_every_real_app_is_removed_on_close(stack: Stack, repos: dict[str, PullRequestRepo], apps: list[App]) -> None:
    for app in apps:
        stack.send("closed", app.pr, repos[app.name], repos[app.name].sha_b)
    for app in apps:
        stack.wait_gone(app.pr)
        assert_fully_removed(stack, app.pr)
