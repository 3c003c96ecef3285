"""A running stack for end-to-end tests: the real service, a real nginx and the fake code host."""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from orchestrator.common.host_env import HostEnv
from orchestrator.common.labels import DEPLOYMENT_LABEL, OWNER_LABEL
from orchestrator.common.naming import deployment_id, preview_name, preview_segment
from orchestrator.runtime.data_seeds import DATA_SEED_LABEL
from orchestrator.runtime.database_seeds import SEED_LABEL
from orchestrator.runtime.seed_layers import HOLDER_LABEL
from orchestrator.runtime.seed_spares import SPARE_LABEL
from tests.support import web
from tests.support.fake_codehost import FakeCodeHost
from tests.support.git_repos import PullRequestRepo
from tests.support.live import ServiceProcess, wait_until
from tests.support.nginx import Nginx
from tests.support.payloads import pr_payload, webhook_headers
from tests.support.standins import overrides_setting, require_engine

SLUG = "codertocat-hello-world"
RUN = secrets.token_hex(8)  # this pytest process's: the part of the shared key (give_shared_key) no other run has
DEPLOY_TIMEOUT = 420


@dataclass
class Stack:
    service: ServiceProcess
    nginx: Nginx
    codehost: FakeCodeHost
    root: Path
    # The engine the service deploys to, when not the suite's (the swarm's manager): what the checks below look at,
    # never the suite's engine, where another lane's previews of the same numbers may run.
    docker_host: str | None = None

    def send(self, action: str, pr: int, repo: PullRequestRepo, sha: str, expect: int = 200,
             repository: str | None = None) -> httpx.Response:
        body = pr_payload(action, number=pr, sha=sha, clone_url=repo.clone_url, ref=repo.branch,
                          repository=repository)
        response = web.post(f"{self.service.url}/webhook/codehost", content=body,
                            headers=webhook_headers(body), timeout=10)
        assert response.status_code == expect, response.text
        return response

    def close(self, pr: int, repo: PullRequestRepo, sha: str) -> None:
        """Close the pull request and check that nothing of its preview is left."""
        self.send("closed", pr, repo, sha)
        self.wait_gone(pr)
        assert_fully_removed(self, pr)

    def records(self) -> dict[str, dict]:
        deployments = web.get(f"{self.service.url}/api/previews", timeout=10).json()["deployments"]
        return {d["deploymentId"]: d for d in deployments}

    def store(self) -> dict:
        return json.loads((self.root / "state" / "deployments.json").read_text())

    def wait_for(self, pr: int, status: str, sha: str | None = None) -> dict:
        deployment = deployment_id(SLUG, pr)

        def settled() -> bool:
            record = self.records().get(deployment)
            return bool(record and record["status"] == status and (sha is None or record["commitSha"] == sha))

        try:
            wait_until(settled, timeout=DEPLOY_TIMEOUT, message=f"{deployment} {status}")
        except AssertionError:
            log = self.root / "deployments" / SLUG / f"{preview_segment(pr)}.log"
            tail = log.read_text()[-4000:] if log.exists() else "(no log)"
            raise AssertionError(f"{deployment} not {status}: {self.records().get(deployment)}\n{tail}") from None
        return self.records()[deployment]

    def wait_gone(self, pr: int) -> None:
        wait_until(lambda: deployment_id(SLUG, pr) not in self.records(), timeout=DEPLOY_TIMEOUT, message="cleanup")

    def wait_page(self, pr: int, text: str, path: str = "") -> None:
        """nginx applies a reload asynchronously: the route serves a moment after the record says running."""
        wait_until(lambda: self.page(pr, path).text == text, timeout=15, message=f"page {path!r} = {text!r}")
        self.nginx.wait_settled()

    def page(self, pr: int, path: str = "", slug: str = SLUG) -> httpx.Response:
        return web.get(f"{self.nginx.url}/{slug}/{preview_segment(pr)}/{path}", timeout=10)

    def logs(self, pr: int) -> str:
        """The deployment log, as the service serves it."""
        return web.get(f"{self.service.url}/api/previews/{deployment_id(SLUG, pr)}/logs", timeout=10).text

    def wait_comment(self, pr: int, *texts: str) -> str:
        """The comment follows the record (the spec's order: record, then comment)."""
        wait_until(lambda: all(t in self.comment(pr) for t in texts), timeout=30, message=f"comment {texts}")
        return self.comment(pr)

    def comment(self, pr: int) -> str:
        comments = self.codehost.comments_on("Codertocat", "Hello-World", pr)
        assert len(comments) == 1, comments  # one comment per pull request, edited in place
        return comments[0]["body"]


def service_env(codehost: FakeCodeHost, nginx: Nginx, **extra: str) -> dict[str, str]:
    return dict(
        CODEHOST_API_URL=codehost.url,
        PREVIEW_BASE_URL=nginx.url,
        IMAGE_OVERRIDES=overrides_setting(),
        ALLOWED_CLONE_PROTOCOLS="file",
        HEALTH_CHECK_INTERVAL_SECONDS="0.5",
        HEALTH_CHECK_TIMEOUT_SECONDS="20",
        PROXY_TEST_COMMAND=nginx.test_command,
        PROXY_RELOAD_COMMAND=nginx.reload_command,
        PROXY_LISTEN_PORT=str(nginx.port),  # where the deploy checks that nginx serves the new route
        CODEHOST_RETRY_BASE_SECONDS="0.05",
        MAX_CONCURRENT_BUILDS="2",
    ) | extra


def start_stack(root: Path, reload_command: Callable[[Nginx], str] | None = None, nginx_all_addresses: bool = False,
                own_key: bool = False, **extra: str) -> Stack:
    """`nginx_all_addresses`: nginx listens on *:port like setup-nginx's site (PREVIEW_ROUTING=host needs it).
    `own_key`: the service makes its own key (a benchmark's stack), not the engine's tests' shared one."""
    require_engine()
    routes_where_workers_look(root / "proxy")
    codehost = FakeCodeHost().start()
    nginx = Nginx(root / "nginx", root / "proxy", all_addresses=nginx_all_addresses).start()
    if reload_command is not None:
        extra["PROXY_RELOAD_COMMAND"] = reload_command(nginx)
    service = ServiceProcess(root, **service_env(codehost, nginx, **extra))
    if not own_key:
        give_shared_key(Path(service.env["DEPLOYMENTS_DB"]).parent, service.env.get("DOCKER_HOST", ""))
    return Stack(service.start(), nginx, codehost, root, extra.get("DOCKER_HOST"))


def give_shared_key(state: Path, docker_host: str) -> None:
    """The service key of every test's stack on one engine, unless the state has one: the build cache mounts templates
    key with it (RenderContext.cache_mount: a repository's Go build cache) are then shared by the tests' previews of
    a repository as by one service's, rather than each test's first Go build compiling the standard library again.
    What is keyed by the repository stays apart between repositories, which is what the tests check. One key per
    pytest process (RUN): what an interrupted run left (a database volume of the same name) does not open with it."""
    key = state / "db-password.key"
    if key.exists():
        return
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    key.write_bytes(hashlib.sha256(f"po-test-shared-key:{docker_host}:{RUN}".encode()).hexdigest().encode())
    key.chmod(0o600)


def routes_where_workers_look(link: Path) -> None:
    """PROXY_CONFIG_DIR as on a host (/etc/nginx/preview-locations): in a directory nginx's workers (nobody) can
    look into, so that routes open by their flag (adapters/nginx.py) — pytest's temporary directories are private
    to root. `link` (the stack's root/proxy) points there; stop_stack removes it."""
    if link.is_symlink():
        if link.exists():
            return
        link.unlink()
    elif link.is_dir():  # a stack of its own making, kept as it is
        return
    target = Path(tempfile.mkdtemp(prefix="po-routes-", dir="/tmp"))
    target.chmod(0o755)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def stop_stack(stack: Stack) -> None:
    """Stop the stack and remove what its service left on the engine: the previews a test did not close (they
    would meet the next test's previews of the same numbers: same compose project, same volume) and the seeds."""
    stack.service.stop()
    stack.nginx.stop()
    stack.codehost.stop()
    try:
        left = list(stack.store()["deployments"])
    except (OSError, ValueError, KeyError):
        left = []
    remove_previews(left, stack.docker_host)
    remove_seeds(stack.root / "state", stack.docker_host)
    routes = stack.root / "proxy"
    if routes.is_symlink() and routes.resolve().name.startswith("po-routes-"):  # the one routes_where_workers_look made
        shutil.rmtree(routes.resolve(), ignore_errors=True)


def docker(host: str | None) -> list[str]:
    """The docker command for the engine `host` (None: DOCKER_HOST's, the suite's engine)."""
    return ["docker", *(["-H", host] if host else [])]


def remove_previews(deployment_ids: list[str], host: str | None = None) -> None:
    """Every container, volume and network labelled with one of `deployment_ids`, and the images built for them
    (labelled too, which a close removes), as the engine has them. Preview resources carry no owner: like the
    compose projects they are named after, two test runs on one engine cannot keep them apart."""
    if not deployment_ids:
        return
    wanted = set(deployment_ids)
    images = [image for deployment in wanted for image in built_images(deployment, host)]
    # The holders of layered copies first (seed_layers.hold: labelled apart, they hold the volumes below)
    holders = subprocess.run([*docker(host), "ps", "-a", "--filter", f"label={HOLDER_LABEL}", "--format",
                              f'{{{{.ID}}}} {{{{.Label "{HOLDER_LABEL}"}}}}'],
                             capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    held = [ident for ident, _, label in (row.partition(" ") for row in holders) if label in wanted]
    if held:
        subprocess.run([*docker(host), "rm", "--force", *held], capture_output=True, timeout=120, check=False)
    for listing, field, removal in ((["ps", "-a"], "ID", ["rm", "--force", "--volumes"]),
                                    (["volume", "ls"], "Name", ["volume", "rm", "--force"]),
                                    (["network", "ls"], "ID", ["network", "rm"])):
        rows = subprocess.run([*docker(host), *listing, "--filter", f"label={DEPLOYMENT_LABEL}", "--format",
                               f'{{{{.{field}}}}} {{{{.Label "{DEPLOYMENT_LABEL}"}}}}'],
                              capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
        found = [name for name, _, label in (row.partition(" ") for row in rows) if label in wanted]
        if found:
            subprocess.run([*docker(host), *removal, *found], capture_output=True, timeout=120, check=False)
    if images:
        subprocess.run([*docker(host), "rmi", "--force", *sorted(set(images))], capture_output=True, timeout=120,
                       check=False)


def remove_seeds(state_dir: Path, host: str | None = None) -> None:
    """The database seeds a service with `state_dir` made (the service keeps them on the engine for its next
    previews, under its state directory's marker; a seed being made when it stopped has a container too): a
    stack takes them along, or every test run would leave ~50 MB per stack on the engine."""
    marker = HostEnv.for_state_dir(state_dir).marker
    # The empty seeds of images, the repositories' seeds and their spare layers
    for label in (SEED_LABEL, DATA_SEED_LABEL, SPARE_LABEL):
        filters = ["--filter", f"label={OWNER_LABEL}={marker}", "--filter", f"label={label}"]
        for listing, removal in ((["ps", "-aq"], ["rm", "--force", "--volumes"]),
                                 (["volume", "ls", "-q"], ["volume", "rm", "--force"])):
            found = subprocess.run([*docker(host), *listing, *filters], capture_output=True, text=True, timeout=60,
                                   check=True).stdout.split()
            if found:
                subprocess.run([*docker(host), *removal, *found], capture_output=True, timeout=120, check=True)


def built_images(deployment_id: str, host: str | None = None) -> list[str]:
    """The images built for a preview: labelled with its id, named by a keyed digest (RenderContext.built_image)."""
    return subprocess.run([*docker(host), "images", "-q", "--filter", f"label={DEPLOYMENT_LABEL}={deployment_id}"],
                          capture_output=True, text=True, timeout=60, check=True).stdout.split()


def image_names(images: list[str], host: str | None = None) -> list[str]:
    """What an assertion shows of `images`: each one's names, or its id when it has none (dangling)."""
    if not images:
        return []
    listed = subprocess.run([*docker(host), "image", "inspect", "--format", "{{.Id}} {{.RepoTags}}", *images],
                            capture_output=True, text=True, timeout=60).stdout
    return listed.splitlines()


def labelled_resources(deployment_id: str, host: str | None = None) -> list[str]:
    found = []
    for argv in ([*docker(host), "ps", "-aq"], [*docker(host), "volume", "ls", "-q"],
                 [*docker(host), "network", "ls", "-q"]):
        output = subprocess.run([*argv, "--filter", f"label={DEPLOYMENT_LABEL}={deployment_id}"],
                                capture_output=True, text=True, timeout=60, check=True).stdout
        found += output.split()
    return found


def assert_fully_removed(stack: Stack, pr: int, slug: str = SLUG) -> None:
    deployment, segment, name = deployment_id(slug, pr), preview_segment(pr), preview_name(slug, pr)
    assert labelled_resources(deployment, stack.docker_host) == [], f"resources of {deployment} left behind"
    left = built_images(deployment, stack.docker_host)
    assert left == [], f"images built for {deployment} left behind: {image_names(left, stack.docker_host)}"
    assert not (stack.root / "deployments" / slug / segment).exists()
    assert not (stack.root / "deployments" / slug / f"{segment}.git").exists()
    assert not (stack.root / "deployments" / slug / f"{segment}.build").exists()  # keyed Dockerfiles
    assert not (stack.root / "deployments" / slug / f"{segment}.log").exists()
    assert not (stack.root / "proxy" / f"{name}.conf").exists()
    assert not (stack.root / "proxy" / "servers" / f"{name}.conf").exists()  # PREVIEW_ROUTING=host
    assert not (stack.root / "proxy" / "activity" / f"{name}.log").exists()  # PREVIEW_IDLE_MINUTES
    store = stack.store()
    assert deployment not in store["deployments"] and deployment not in store["portAllocations"]
    wait_until(lambda: stack.page(pr, slug=slug).status_code == 404, timeout=10, message="route gone")
