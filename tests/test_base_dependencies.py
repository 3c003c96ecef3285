"""A base preview's installed dependencies, kept for its repository's pull requests (flows/base_dependencies.py,
frameworks/nestjs `NodeBuild.from_base`): a pull request whose npm manifests differ from the base preview's starts
from the base preview's `node_modules` and brings them to its lockfile with `npm install`; `npm ci` where that
would change the lockfile.

The engine test's packages are npm's own (`file:` dependencies on the stand-in image's bundled copies), so that it
installs and removes real packages without reaching a registry."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from frameworks.nestjs import installs, node_build
from orchestrator.common.commands import CommandFailed
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import BASE
from orchestrator.flows.base_dependencies import build, keep, pools, to_keep, with_base, with_fallback
from orchestrator.plugin_api.project_files import ProjectFiles
from orchestrator.plugin_api.runtime import KeptImage, RuntimeFailure, WarmPool
from orchestrator.plugin_api.types import DEPENDENCIES_LABEL, BaseDependencies, RenderContext
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import (
    INJECTED_DOCKERFILE,
    RenderedDeployment,
    make_context,
    render_deployment,
)
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.runtime.compose_cli import DockerResources
from orchestrator.runtime.kept_stages import kept_check, kept_image
from orchestrator.state.records import PullRequestEvent
from orchestrator.state.store import DeploymentStore
from tests.support import web
from tests.support.git_repos import PullRequestRepo, git, make_pr_repo
from tests.support.live import wait_until
from tests.support.payloads import push_payload, webhook_headers
from tests.support.records import sample_record, track
from tests.support.repos import config_for, make_repo
from tests.support.stack import SLUG, Stack, start_stack, stop_stack

KEY = b"k"
NPM_PACKAGES = "/usr/local/lib/node_modules/npm/node_modules"  # in the node stand-in, as in node's own image


def manifests(*packages: str, nonce: str = "") -> dict[str, str]:
    return {"package.json": json.dumps({"name": "sample", "version": "1.0.0", "private": True, "description": nonce,
                                        "scripts": {"build": "node build.js"},  # the sample's dist/main.js
                                        "dependencies": {name: f"file:{NPM_PACKAGES}/{name}" for name in packages}}),
            "package-lock.json": "{}"}


def context(pr: int, base: BaseDependencies | None = None, repo: str = "shop") -> RenderContext:
    made = make_context("acme", repo, pr, 8001, 9001, KEY, build_cache=True)
    return made.model_copy(update={"base_dependencies": base})


def labelled(tmp_path: Path, files: dict[str, str]) -> str:
    project = ProjectFiles(make_repo(tmp_path, files=files))
    return installs(node_build(project), project, "node:20-bookworm-slim", context(BASE)).installed


@pytest.mark.uses("nestjs")
def test_a_pull_request_starts_from_the_base_preview_s_dependencies_only_when_its_manifests_differ(
        tmp_path: Path) -> None:
    base = labelled(tmp_path / "base", manifests("abbrev"))
    assert base and base == labelled(tmp_path / "again", manifests("abbrev"))  # what it installs from, no more
    kept = BaseDependencies(image=context(BASE).kept_dependencies(), installed=base)
    changed = ProjectFiles(make_repo(tmp_path / "pr", files=manifests("abbrev", "semver")))
    plan = installs(node_build(changed), changed, "node:20-bookworm-slim", context(1, kept))
    assert plan.from_base == kept.image and plan.installed not in ("", base)
    same = ProjectFiles(make_repo(tmp_path / "same", files=manifests("abbrev")))  # a change of code: the cache
    assert installs(node_build(same), same, "node:20-bookworm-slim", context(1, kept)).from_base == ""
    # the base installed from npm-shrinkwrap.json: its /app would hold it, which npm prefers to package-lock.json
    shrinkwrap = {**manifests("abbrev"), "npm-shrinkwrap.json": "{}"}
    del shrinkwrap["package-lock.json"]
    wrapped = BaseDependencies(image=kept.image, installed=labelled(tmp_path / "wrapped", shrinkwrap))
    assert installs(node_build(changed), changed, "node:20-bookworm-slim", context(1, wrapped)).from_base == ""
    # another build image (IMAGE_OVERRIDES, a new template): its node_modules may not run there
    assert installs(node_build(changed), changed, "node:22-bookworm-slim", context(1, kept)).from_base == ""
    for other in ({"package.json": "{}", "yarn.lock": ""}, {"package.json": "{}", "pnpm-lock.yaml": ""},
                  {"package.json": "{}"},  # npm install without a lockfile: nothing to hold it to
                  {**manifests("abbrev"), "package.json": '{"dependencies": {"@prisma/client": "5"}}'}):
        project = ProjectFiles(make_repo(tmp_path / f"other-{len(list(tmp_path.iterdir()))}", files=other))
        plan = installs(node_build(project), project, "node:20-bookworm-slim", context(1, kept))
        assert (plan.installed, plan.from_base) == ("", "")


@pytest.mark.uses("nestjs")
def test_only_a_base_preview_s_injected_dependencies_stage_is_kept(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("nestjs"), files=manifests("abbrev"))
    config = load_checkout_config(host, repo)

    def rendered(pr: int, base: BaseDependencies | None = None):  # noqa: ANN202
        made = context(pr, base)
        return to_keep(event(pr), made, render_deployment(host, repo, config, made))

    as_base = rendered(BASE)
    assert as_base.kept_dependencies == context(BASE).kept_dependencies()
    assert rendered(1).kept_dependencies == ""  # a pull request's build is never what another one starts from
    label = re.search(rf"^LABEL {re.escape(DEPENDENCIES_LABEL)}=(\S+)$", as_base.files[INJECTED_DOCKERFILE], re.M)
    assert label is not None
    # the base preview installed other manifests with the same build image: the pull request starts from them
    base = BaseDependencies(image=as_base.kept_dependencies, installed=label[1].split("-")[0] + "-other")
    dockerfile = rendered(1, base).files[INJECTED_DOCKERFILE]
    assert dockerfile.startswith("# Injected") and f"\nFROM {base.image} AS dependencies\n" in dockerfile
    assert f"\nLABEL {DEPENDENCIES_LABEL}={label[1]}\n" in dockerfile  # what this one installs from
    assert "\nFROM node" not in dockerfile.split(" AS production-dependencies")[0]
    # the repository's own Dockerfile: nothing kept, whatever its stages are called
    (repo / "Dockerfile").write_text(f"FROM node:20 AS dependencies\nLABEL {DEPENDENCIES_LABEL}=x\nFROM node:20\n")
    assert rendered(BASE).kept_dependencies == ""
    # no other repository can name the kept image
    assert context(BASE, repo="billing").kept_dependencies() != as_base.kept_dependencies


def event(pr: int, owner: str = "acme", name: str = "shop", codehost: str = "github") -> PullRequestEvent:
    made = context(pr, repo=name)
    return PullRequestEvent(delivery_id="d", action="opened", deployment_id=made.deployment_id,
                            project_slug=made.project_slug, repo_owner=owner, repo_name=name, pr_number=pr,
                            received_at=datetime.now(UTC), codehost=codehost)


UNREADABLE = "the engine cannot say"


class KeepingRuntime:
    """The runtime's two calls, recorded; `label` is what the engine's kept image says, None when it is absent,
    UNREADABLE when the engine cannot say."""

    def __init__(self, label: str | None = "abc-def", fails: bool = False) -> None:
        self.label, self.fails, self.asked, self.kept = label, fails, [], []

    def kept_image(self, image: str) -> KeptImage | None:
        self.asked.append(image)
        if self.label == UNREADABLE:
            raise RuntimeFailure(f"The image {image} could not be read", "Cannot connect to the Docker daemon")
        labels = {} if self.label is None else {DEPENDENCIES_LABEL: self.label}
        return KeptImage(id="sha256:1", labels=labels, size_bytes=300 * 2**20)

    def keep_stage(self, deployment_id: str, compose_file: Path, service: str, stage: str, image: str,
                   log: object, control: object) -> None:
        if self.fails:
            raise RuntimeFailure("The build's dependencies stage could not be kept", "no space left on device")
        self.kept.append((deployment_id, service, stage, image))


def test_a_pull_request_looks_only_for_its_own_repository_s_base_preview_s_dependencies(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    runtime = KeepingRuntime()
    flows = SimpleNamespace(store=store, runtime=runtime)
    assert with_base(flows, event(1), context(1)).base_dependencies is None  # no base preview: no look at all
    assert runtime.asked == []
    track(tmp_path / "deployments.json", sample_record(BASE, "acme", "shop"))
    found = with_base(flows, event(1), context(1)).base_dependencies
    assert found == BaseDependencies(image=context(1).kept_dependencies(), installed="abc-def")
    # Gitea's acme/shop has the same slug, not the same repository; a base preview renders without its own
    assert with_base(flows, event(1, codehost="gitea"), context(1)).base_dependencies is None
    assert with_base(flows, event(BASE), context(BASE)).base_dependencies is None
    assert runtime.asked == [context(1).kept_dependencies()]
    runtime.label = None  # not kept (another framework, the swarm runtime, removed)
    assert with_base(flows, event(1), context(1)).base_dependencies is None
    runtime.label = UNREADABLE  # the engine cannot say: rendered as without a base preview, not failed
    assert with_base(flows, event(1), context(1)).base_dependencies is None


def test_the_dashboard_lists_each_base_preview_s_kept_dependencies_apart_from_the_seeds_bound(tmp_path: Path) -> None:
    store = DeploymentStore(tmp_path / "deployments.json")
    track(tmp_path / "deployments.json", sample_record(BASE, "acme", "shop"))
    track(tmp_path / "deployments.json", sample_record(1, "acme", "shop"))  # a pull request keeps none
    runtime = KeepingRuntime()
    flows = SimpleNamespace(store=store, runtime=runtime, password_key=lambda: KEY)
    [pool] = pools(flows)
    assert pool == WarmPool(repository="github/acme/shop", kind="installed dependencies", count=1,
                            detail="the base preview's, for its pull requests to install on top of",
                            size_bytes=300 * 2**20, bound="BASE_PREVIEWS")
    assert runtime.asked == [context(BASE).kept_dependencies()]  # the base preview's name, not a pull request's
    runtime.label = None  # an image of that name without the label is not one the service kept
    assert pools(flows) == []
    runtime.label = UNREADABLE  # the dashboard still answers
    assert pools(flows) == []


def test_a_dependencies_stage_that_cannot_be_kept_does_not_fail_the_base_preview(tmp_path: Path) -> None:
    rendered = RenderedDeployment(compose_file="c.yml", compose={}, kept_dependencies="po-build/x-dependencies")
    notes: list[str] = []
    log = SimpleNamespace(note=notes.append)
    runtime = KeepingRuntime(fails=True)
    keep(SimpleNamespace(runtime=runtime), event(BASE), rendered, tmp_path / "c.yml", log, None)
    assert notes == ["The build's dependencies stage could not be kept: pull requests install their dependencies "
                     "from nothing (no space left on device)"]
    runtime.fails = False
    keep(SimpleNamespace(runtime=runtime), event(BASE), rendered, tmp_path / "c.yml", log, None)
    assert runtime.kept == [("acme-shop-base", "app", "dependencies", "po-build/x-dependencies")]
    keep(SimpleNamespace(runtime=runtime), event(1), replace(rendered, kept_dependencies=""), tmp_path / "c.yml",
         log, None)
    assert len(runtime.kept) == 1


@pytest.mark.uses("nestjs")
def test_a_pull_request_whose_base_preview_s_dependencies_go_before_its_build_builds_without_them(
        host: PluginHost, tmp_path: Path) -> None:
    """Looked up at the render, read by the build: a base preview removed in between takes the image along, and the
    pull request's build then installs from nothing instead of failing."""
    repo = make_repo(tmp_path / "r", config_for("nestjs"), files=manifests("abbrev", "semver"))
    config = load_checkout_config(host, repo)
    base = BaseDependencies(image=context(BASE).kept_dependencies(),
                            installed=labelled(tmp_path / "base", manifests("abbrev")))  # other manifests
    renders: list[RenderContext] = []

    def render(made: RenderContext) -> RenderedDeployment:
        renders.append(made)
        return render_deployment(host, repo, config, made)

    plain = with_fallback(context(1), render(context(1)), render)  # no base preview: nothing more rendered
    assert plain.without_base is None and len(renders) == 1
    installed = labelled(tmp_path / "same", manifests("abbrev", "semver"))
    same = context(1, BaseDependencies(image=base.image, installed=installed))
    assert with_fallback(same, render(same), render).without_base is None  # its manifests': not FROM the base
    rendered = with_fallback(context(1, base), render(context(1, base)), render)
    assert rendered.without_base is not None and renders[-1].base_dependencies is None
    image, without = rendered.without_base
    assert image == base.image and f"FROM {base.image} AS" not in without
    assert without == render(context(1)).files[INJECTED_DOCKERFILE]
    work = tmp_path / "work"
    work.mkdir()
    (work / INJECTED_DOCKERFILE).write_text(rendered.files[INJECTED_DOCKERFILE])
    notes: list[str] = []
    log = SimpleNamespace(note=notes.append)
    runtime = BuildingRuntime(work, fails_once=True, kept=False)
    build(SimpleNamespace(runtime=runtime), event(1), rendered, work, work / "c.yml", log, None)
    assert [f"FROM {base.image} AS" in built for built in runtime.built] == [True, False]
    assert runtime.built[1] == without and notes[0].startswith("the base preview's installed dependencies are gone")
    # the image is still there, or the engine cannot say: the build failed for its own reasons, which are the pull
    # request's to see
    for kept in (True, None):
        runtime = BuildingRuntime(work, fails_once=True, kept=kept)
        with pytest.raises(RuntimeFailure, match="Image build failed"):
            build(SimpleNamespace(runtime=runtime), event(1), rendered, work, work / "c.yml", log, None)
        assert len(runtime.built) == 1
    assert len(notes) == 1


class BuildingRuntime:
    """runtime.build that records the injected Dockerfile it read, and fails the first time when asked; `kept`
    None: the engine cannot say whether the base preview's image is there."""

    def __init__(self, work: Path, fails_once: bool, kept: bool | None) -> None:
        self.work, self.fails, self.kept, self.built = work, fails_once, kept, []

    def build(self, deployment_id: str, compose_file: Path, log: object, control: object) -> None:
        self.built.append((self.work / INJECTED_DOCKERFILE).read_text())
        if self.fails:
            self.fails = False
            raise RuntimeFailure("Image build failed", "pull access denied for po-build/...")

    def kept_image(self, image: str) -> KeptImage | None:
        if self.kept is None:
            raise RuntimeFailure(f"The image {image} could not be read", "context deadline exceeded")
        return KeptImage(id="sha256:1", size_bytes=1) if self.kept else None


class InspectingDocker(DockerResources):
    """`docker image inspect` answering as the CLI does: `answers` maps an image to its output or CommandFailed."""

    def __init__(self, answers: dict[str, str | CommandFailed]) -> None:
        super().__init__(HostEnv.for_state_dir(Path("/nonexistent")))
        self.answers = answers

    def command(self, argv: list[str], log: object = None, timeout: float = 60, control: object = None,
                stdin: bytes | None = None) -> str:
        answer = self.answers[argv[-1]]
        if isinstance(answer, CommandFailed):
            raise answer
        return answer


def test_an_image_the_engine_cannot_read_is_never_taken_for_absent() -> None:
    def failed(output: str) -> CommandFailed:
        return CommandFailed(["docker", "image", "inspect"], 1, output)

    labels = {DEPENDENCIES_LABEL: "abc", "count": 3}
    docker = InspectingDocker({
        "kept": json.dumps([{"Id": "sha256:1", "Config": {"Labels": labels}, "Size": 5}]),
        "gone": failed("Error response from daemon: No such image: gone"),
        "down": failed("Cannot connect to the Docker daemon at unix:///run/docker.sock"),
        "odd": "not json"})
    assert kept_image(docker, "kept") == KeptImage(id="sha256:1", labels={DEPENDENCIES_LABEL: "abc"}, size_bytes=5)
    assert kept_image(docker, "gone") is None
    for image in ("down", "odd"):
        with pytest.raises(RuntimeFailure, match=f"The image {image} could not be read"):
            kept_image(docker, image)


def npm_lockfiles(root: Path, sides: list[str]) -> None:
    """package-lock.json for each `root/side`'s package.json, as npm writes it in the build's /app (no network; one
    container for all of them)."""
    # in /app, as the build: a `file:` dependency is recorded by its path from there
    script = ('mkdir -p /app && cd /app && for side in "$@"; do rm -f package-lock.json '
              '&& cp "/m/$side/package.json" . && npm install --package-lock-only --no-audit --no-fund '
              '&& cp package-lock.json "/m/$side/" || exit 1; done')
    subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{root}:/m", "po-standin/node:test",
                    "sh", "-c", script, "lockfiles", *sides], check=True, capture_output=True, timeout=180)
    for side in sides:
        (root / side / "package-lock.json").chmod(0o644)


PAGE = """const http = require("http");
const fs = require("fs");
const path = require("path");
const message = fs.readFileSync(path.join(__dirname, "message.txt"), "utf8").trim();
const has = (name) => { try { require.resolve(name); return name; } catch { return null; } };
const packages = ["abbrev", "semver"].filter(has).join(",");
http.createServer((req, res) => res.end(req.url === "/health" ? "ok" : `${message} with ${packages}\\n`))
  .listen(Number(process.env.PORT));
"""


def image_id(image: str) -> str | None:
    found = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image],
                           capture_output=True, text=True, timeout=30)
    return found.stdout.strip() if found.returncode == 0 else None


def image_labels(image: str) -> dict[str, str] | None:
    found = subprocess.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
                           capture_output=True, text=True, timeout=30)
    return json.loads(found.stdout) if found.returncode == 0 else None


def kept_on_dashboard(stack: Stack) -> list[str]:
    """The dashboard's "Kept warm" rows: repository, what, how many."""
    page = web.get(f"{stack.service.url}/dashboard", timeout=30).text
    table = page.split('<table id="pools"', 1)[1].split("</tbody>", 1)[0]
    return [" ".join(re.findall(r"<td[^>]*>([^<]*)</td>", row)[:3]) for row in table.split("<tr>")[2:]]


@pytest.mark.docker
@pytest.mark.live
@pytest.mark.uses("nestjs", "postgres")
def test_a_dependency_change_installs_on_top_of_the_base_preview_s_dependencies(tmp_path: Path) -> None:
    nonce = uuid.uuid4().hex  # what the build installs from is new to the engine's cache: the installs run
    wanted = {"a": ("abbrev",), "b": ("semver",), "c": ("abbrev", "semver")}
    for side, packages in wanted.items():
        (tmp_path / "manifests" / side).mkdir(parents=True)
        (tmp_path / "manifests" / side / "package.json").write_text(manifests(*packages, nonce=nonce)["package.json"])
    npm_lockfiles(tmp_path / "manifests", list(wanted))
    sides = {side: {name: (tmp_path / "manifests" / side / name).read_text()
                    for name in ("package.json", "package-lock.json")} for side in wanted}
    # commit A (the default branch) has abbrev; commit B replaces it with semver
    repo = make_pr_repo(tmp_path / "repos", "nestjs", "main", config=config_for("nestjs"),
                        files={"src/main.js": PAGE, **sides["a"]}, files_b=sides["b"])
    bare = Path(repo.clone_url)
    git(bare, "update-ref", "refs/heads/feature/semver", repo.sha_b)
    git(bare, "update-ref", "refs/heads/main", repo.sha_a)
    git(bare, "symbolic-ref", "HEAD", "refs/heads/main")
    pull = PullRequestRepo(repo.clone_url, "feature/semver", repo.sha_a, repo.sha_b)
    stack = start_stack(tmp_path / "stack", BASE_PREVIEWS="Codertocat/Hello-World", RECONCILE_INTERVAL_MINUTES="0")
    try:
        body = push_payload("refs/heads/main", repo.sha_a, repo.clone_url, "main")
        assert web.post(f"{stack.service.url}/webhook/codehost", content=body,
                        headers=webhook_headers(body, event="push"), timeout=10).status_code == 200
        stack.wait_for(BASE, "running", repo.sha_a)
        kept = [image for image in subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}"],
                                                  capture_output=True, text=True, check=True).stdout.split()
                if image.startswith("po-build/") and image.endswith("-dependencies")]
        assert len(kept) == 1, kept
        labels = image_labels(kept[0])
        assert labels is not None and labels[DEPENDENCIES_LABEL] and labels["dev.preview-orchestrator.deployment"] \
            == f"{SLUG}-base"
        line = kept_check(DockerResources(HostEnv.for_state_dir(tmp_path))).line()  # doctor's
        assert re.search(r"kept dependencies \(BASE_PREVIEWS\): [1-9]\d* base previews?'s? installed dependencies, "
                         r"[1-9]\d* MB", line), line
        assert kept_on_dashboard(stack) == ["github/codertocat/hello-world installed dependencies 1"]
        # the pull request: semver instead of abbrev. npm install on the base preview's node_modules adds one and
        # removes the other, and the lockfile is kept to
        stack.send("opened", 1, pull, repo.sha_b)
        stack.wait_for(1, "running", repo.sha_b)
        stack.wait_page(1, "commit B with semver\n")
        log = stack.logs(1)
        assert "npm install --no-audit --no-fund && cmp -s package-lock.json /tmp/lockfile" in log
        assert "removed 1 package" in log and "added 1 package" in log
        # a lockfile out of step with package.json: npm install would rewrite it, so npm ci runs, and refuses it
        # as it would have without a base preview
        out_of_step = make_pr_repo(tmp_path / "repos2", "nestjs", "main", config=config_for("nestjs"),
                                   files={"src/main.js": PAGE, **sides["a"]},
                                   files_b={"package.json": sides["c"]["package.json"]})
        stack.send("opened", 2, out_of_step, out_of_step.sha_b)
        stack.wait_for(2, "failed", out_of_step.sha_b)
        assert "can only install packages when your package.json and package-lock.json" in stack.logs(2)
        # the default branch moves to commit B (other manifests): the name is kept for the new install, and the
        # image it stood for goes
        before = image_id(kept[0])
        git(bare, "update-ref", "refs/heads/main", repo.sha_b)
        body = push_payload("refs/heads/main", repo.sha_b, repo.clone_url, "main")
        assert web.post(f"{stack.service.url}/webhook/codehost", content=body,
                        headers=webhook_headers(body, event="push"), timeout=10).status_code == 200
        stack.wait_for(BASE, "running", repo.sha_b)
        assert before is not None and image_id(kept[0]) not in (None, before) and image_id(before) is None
        # the base preview's removal takes its kept dependencies with it
        assert web.delete(f"{stack.service.url}/api/previews/{SLUG}-base", timeout=60).status_code == 200
        stack.wait_gone(BASE)
        wait_until(lambda: image_labels(kept[0]) is None, timeout=30, message="the kept dependencies removed")
        assert kept_on_dashboard(stack) == []
    finally:
        stop_stack(stack)
