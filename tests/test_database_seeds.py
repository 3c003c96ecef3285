"""Database seeds (plugin_api.DatabaseSeed, runtime/database_seeds.py): a new preview's PostgreSQL starts from a
copy of a data directory initialised once per image.

Without the engine: the postgres plugin's recipe (the password only on standard input, quoted; the success
marker not in the statement text, so an error echoing the statement cannot pass for success) and which
deployments get a seed. With it (Docker, nginx, the service under uvicorn): the first preview makes the seed, the
next one starts from it — its database answers to its own password and not to the seed's, the seed is never
mounted into the preview, a push keeps the data, closing leaves nothing — and a seed that is gone or broken costs
the speed, never the preview. How much faster is measured by bench/preview.py (docs/benchmarks.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from databases import postgres
from orchestrator.common.commands import run
from orchestrator.common.host_env import HostEnv
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import make_context, render_deployment
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.runtime.database_seeds import COPY_LABEL, SEED_LABEL, DatabaseSeeds
from orchestrator.runtime.seed_layers import LAYER_LABEL
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import wait_until
from tests.support.stack import SLUG, Stack, remove_seeds, start_stack, stop_stack

SAMPLES = Path(__file__).parent / "sample_apps"
COPIED = "database volume copied from seed"


def test_the_postgres_seed_script_carries_the_password_quoted_on_stdin_only() -> None:
    context = make_context("acme", "shop", 7, 8001, 9001, b"key")
    wiring = postgres.po_database(database="postgres", context=context)
    assert wiring is not None and wiring.seed is not None
    seed = wiring.seed
    script = seed.script.get_secret_value()
    assert f"PASSWORD '{context.db_password}'" in script and 'RENAME TO "pr_7"' in script
    assert context.db_password not in " ".join(seed.command) and context.db_password not in repr(seed)
    assert context.db_password not in json.dumps(seed.environment)  # the seed names no preview
    assert postgres.DONE not in script  # printed by the last statement, never echoed with the statement's text
    assert script.endswith(";\n\n")  # one command in single-user mode (-j): all statements or none
    assert postgres._literal("it's") == "'it''s'" and postgres._identifier('a"b') == '"a""b"'


def test_only_a_compose_file_generated_from_the_plugins_gets_the_seed(host: PluginHost, tmp_path: Path) -> None:
    generated_repo, owned_repo = tmp_path / "generated", tmp_path / "owned"
    shutil.copytree(SAMPLES / "go", generated_repo)
    shutil.copytree(SAMPLES / "go", owned_repo)
    (owned_repo / "Dockerfile").write_text("FROM golang:1.22\n")  # a build the check reads (none is refused)
    (owned_repo / "compose.preview.yml").write_text(yaml.safe_dump({"services": {
        "app": {"build": {"context": str(owned_repo)}}, "db": {"image": "postgres:16"}}}))  # as normalised
    context = make_context("acme", "shop", 1, 8001, 9001, b"key")
    rendered = render_deployment(host, generated_repo, load_checkout_config(host, generated_repo), context)
    assert rendered.seed is not None and rendered.seed.volume in rendered.compose["volumes"]
    owned = render_deployment(host, owned_repo, load_checkout_config(host, owned_repo), context,
                              normalize=lambda path, project: yaml.safe_load(path.read_text()))
    assert owned.seed is None  # the repository's own database service: nothing is assumed about it


def test_a_command_reads_its_stdin_and_argv_does_not_carry_it(tmp_path: Path) -> None:
    assert run(["cat"], cwd=None, env={"PATH": "/usr/bin:/bin"}, timeout=10, log=None, stdin=b"secret\n") == "secret\n"
    assert run(["true"], cwd=None, env={"PATH": "/usr/bin:/bin"}, timeout=10, log=None, stdin=b"x" * 1_000_000) == ""


# With the engine ---------------------------------------------------------------------------------------------


def docker(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120, input=stdin)


def psql(pr: int, password: str, sql: str) -> subprocess.CompletedProcess[str]:
    """`sql` in the preview's database over TCP, as its app connects (the socket would need no password)."""
    return docker("exec", "-e", f"PGPASSWORD={password}", f"{SLUG}-pr-{pr}-db", "psql", "-h", "127.0.0.1",
                  "-U", postgres.USER, "-d", f"pr_{pr}", "-tAc", sql)


def db_password(pr: int) -> str:
    env = json.loads(docker("inspect", "--format", "{{json .Config.Env}}", f"{SLUG}-pr-{pr}-db").stdout)
    return next(item.split("=", 1)[1] for item in env if item.startswith("POSTGRES_PASSWORD="))


def seed_keys(stack: Stack) -> list[str]:
    markers = stack.root / "state" / "database-seeds"
    return sorted(path.name for path in markers.iterdir() if path.is_file()) if markers.is_dir() else []


def seed_volume(stack: Stack, key: str) -> str:
    return f"po-seed-{HostEnv.for_state_dir(stack.root / 'state').marker[:12]}-{key}"


def open_pr(stack: Stack, pr: int) -> PullRequestRepo:
    repo = make_pr_repo(stack.root / "repos", "go", f"seed/{pr}")
    stack.send("opened", pr, repo, repo.sha_a)
    stack.wait_for(pr, "running", repo.sha_a)
    return repo


def docker_root(volume: str) -> str:
    return docker("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip()


class SeedVolumes:
    """The docker calls a sweep of empty seeds makes: the seeds listed, which a preview is layered on, removals."""

    def __init__(self, seeds: list[str], layered_on: dict[str, list[str]]) -> None:
        self.seeds, self.layered_on, self.removed = seeds, layered_on, []

    def command(self, argv: list[str], *_: object) -> str:
        if argv[:2] == ["volume", "ls"] and f"label={SEED_LABEL}" in argv:
            return "\n".join(name for name in self.seeds if name not in self.removed)
        if argv[:2] == ["volume", "ls"]:
            seed = next(arg for arg in argv if arg.startswith(f"label={LAYER_LABEL}=")).split("=", 2)[2]
            return "\n".join(self.layered_on.get(seed, []))
        if argv[:2] == ["volume", "rm"]:
            self.removed.append(argv[-1])
        return ""


def test_an_empty_seed_a_preview_is_layered_on_stays_until_that_preview_goes(tmp_path: Path) -> None:
    env = HostEnv.for_state_dir(tmp_path)
    engine = SeedVolumes([], {})
    seeds = DatabaseSeeds(env, tmp_path, engine)  # type: ignore[arg-type]
    current, old, pinned_old, making = (seeds.volume(key) for key in ("k1", "k0", "kp", "km"))
    engine.seeds = [current, old, pinned_old, making]
    engine.layered_on = {pinned_old: [f"{SLUG}-3_db-data", f"{SLUG}-3_db-data-layer"]}
    (tmp_path / "database-seeds").mkdir()
    (tmp_path / "database-seeds" / "k1").touch()  # ready: the current seed of its image
    seeds._making.add("km")
    seeds.sweep()
    assert engine.removed == [old]  # no longer current, and nothing layered on it
    engine.layered_on = {}  # preview 3 closed
    seeds.sweep()
    assert engine.removed == [old, pinned_old]
    # A broken copy's seed is removed at once, the failing copy's own overlay not counted; another's keeps it.
    engine.layered_on = {current: [f"{SLUG}-4_db-data", f"{SLUG}-4_db-data-layer"]}
    seeds._remove_unpinned(current, besides=f"{SLUG}-4_db-data")
    assert engine.removed[-1] == current
    engine.layered_on = {making: [f"{SLUG}-5_db-data"]}
    seeds._remove_unpinned(making, besides=f"{SLUG}-4_db-data")
    assert engine.removed[-1] == current


@pytest.fixture
def stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    started = start_stack(tmp_path)
    yield started
    stop_stack(started)


@pytest.mark.docker
@pytest.mark.live
def test_a_new_preview_starts_from_the_seed_and_owns_its_copy(stack: Stack) -> None:
    open_pr(stack, 1)
    assert COPIED not in stack.logs(1)  # no seed yet: made after this deploy, in the background
    wait_until(lambda: seed_keys(stack) != [], timeout=120, message="the seed is made")
    [key] = seed_keys(stack)

    repo = make_pr_repo(stack.root / "repos", "go", "seed/2")
    stack.send("opened", 2, repo, repo.sha_a)
    stack.wait_for(2, "running", repo.sha_a)
    assert f"{COPIED} {key}" in stack.logs(2)
    assert stack.page(2, "db").text == "db reachable"
    password = db_password(2)
    assert psql(2, password, "select current_user, current_database()").stdout.strip() == "preview|pr_2"
    refused = psql(2, postgres.SEED_PASSWORD, "select 1")
    assert refused.returncode != 0 and "password authentication failed" in refused.stderr
    assert psql(2, password, "select count(*) from pg_database where datname = 'seed'").stdout.strip() == "0"
    mounts = json.loads(docker("inspect", "--format", "{{json .Mounts}}", f"{SLUG}-pr-2-db").stdout)
    assert [m["Name"] for m in mounts] == [f"{SLUG}-2_db-data"]  # the seed itself is never the preview's
    # An overlay on the seed (DatabaseSeed.layered): the plugin's command wrote a few catalog pages into its layer
    # instead of copying the seed's files (docs/benchmarks.md)
    options = json.loads(docker("volume", "inspect", "--format", "{{json .Options}}", f"{SLUG}-2_db-data").stdout)
    assert options["type"] == "overlay" and f"lowerdir={docker_root(seed_volume(stack, key))}," in options["o"]
    # Held (seed_layers.hold): the engine counts the layer and the seed in use, so neither a prune nor `volume rm`
    # takes them from under the preview (no container mounts them but the holder: the overlay names their paths).
    layer = f"{SLUG}-2_db-data-layer"
    wait_until(lambda: docker("ps", "--all", "--quiet", "--filter", f"name=po-hold-{SLUG}-2_db-data").stdout != "",
               timeout=30, message="the copy's holder made, once the preview started")
    # (the suite's engine is Docker 20.10: `volume prune` takes named volumes too, as `--all` does from 23.0)
    pruned = docker("volume", "prune", "--force", "--filter", f"label=dev.preview-orchestrator.deployment={SLUG}-2")
    assert pruned.returncode == 0 and layer not in pruned.stdout, pruned.stdout
    for held in (layer, seed_volume(stack, key)):
        assert docker("volume", "rm", held).returncode != 0
    assert password != db_password(1)

    # A push: the volume exists, so it is the preview's data that stays, not a new copy of the seed.
    assert psql(2, password, "create table kept (v text); insert into kept values ('pushed')").returncode == 0
    stack.send("synchronize", 2, repo, repo.sha_b)
    stack.wait_for(2, "running", repo.sha_b)
    assert stack.logs(2).count(COPIED) == 1
    assert psql(2, password, "select v from kept").stdout.strip() == "pushed"

    for pr in (1, 2):
        stack.close(pr, repo, repo.sha_b)  # and nothing of the preview is left
    assert docker("ps", "--all", "--quiet", "--filter", "label=dev.preview-orchestrator.holder-of").stdout == ""
    assert docker("volume", "inspect", seed_volume(stack, key)).returncode == 0  # the host's, for the next preview
    remove_seeds(stack.root / "state")  # what the stack's teardown does: a test run leaves no seed behind
    assert docker("volume", "inspect", seed_volume(stack, key)).returncode != 0


@pytest.mark.docker
@pytest.mark.live
def test_a_seed_gone_or_broken_costs_the_speed_never_the_preview(stack: Stack) -> None:
    open_pr(stack, 1)
    wait_until(lambda: seed_keys(stack) != [], timeout=120, message="the seed is made")
    [key] = seed_keys(stack)

    # Removed from the engine (`docker volume prune`): the next preview initialises its own, the seed is made again.
    assert docker("volume", "rm", seed_volume(stack, key)).returncode == 0
    open_pr(stack, 2)
    assert COPIED not in stack.logs(2) and stack.page(2, "db").text == "db reachable"
    wait_until(lambda: seed_keys(stack) == [key], timeout=120, message="the seed is made again")
    assert docker("volume", "inspect", seed_volume(stack, key)).returncode == 0

    # Broken (no cluster in it): the copy fails, the preview initialises its own database and runs.
    broken = docker("run", "--rm", "--network", "none", "--mount",
                    f"type=volume,source={seed_volume(stack, key)},target=/s",
                    "--entrypoint", "rm", "po-standin/postgres:test", "-f", "/s/PG_VERSION")
    assert broken.returncode == 0, broken.stderr
    open_pr(stack, 3)
    log = stack.logs(3)
    assert "database seed not used" in log and COPIED not in log
    assert stack.page(3, "db").text == "db reachable"
    assert psql(3, db_password(3), "select current_database()").stdout.strip() == "pr_3"
    assert seed_keys(stack) == []  # not used again by this run of the service
    assert docker("volume", "inspect", seed_volume(stack, key)).returncode != 0


@pytest.mark.docker
@pytest.mark.live
def test_a_copy_a_crash_interrupted_is_never_taken_for_the_preview_s_data(stack: Stack) -> None:
    first = open_pr(stack, 1)
    wait_until(lambda: seed_keys(stack) != [], timeout=120, message="the seed is made")
    # What a service killed mid-copy leaves: the volume, with compose's labels, half filled, and the copy's mark.
    volume = f"{SLUG}-4_db-data"
    assert docker("volume", "create", "--label", f"com.docker.compose.project={SLUG}-4", "--label",
                  "com.docker.compose.volume=db-data", "--label", f"{COPY_LABEL}=nonce-4", volume).returncode == 0
    copying = stack.root / "state" / "database-seeds" / "copying"
    copying.mkdir(exist_ok=True)
    (copying / volume).write_text("nonce-4")
    open_pr(stack, 4)
    log = stack.logs(4)
    assert "interrupted; it is made again" in log and COPIED in log
    assert psql(4, db_password(4), "select current_database()").stdout.strip() == "pr_4"
    assert not (copying / volume).exists()

    # A mark whose volume is not the one it names (compose made it since: the preview was closed and opened
    # again without a copy) never costs the data: the push keeps what PR 1 wrote.
    password = db_password(1)
    assert psql(1, password, "create table kept (v text); insert into kept values ('mine')").returncode == 0
    (copying / f"{SLUG}-1_db-data").write_text("stale")
    stack.send("synchronize", 1, first, first.sha_b)
    stack.wait_for(1, "running", first.sha_b)
    assert psql(1, password, "select v from kept").stdout.strip() == "mine"
