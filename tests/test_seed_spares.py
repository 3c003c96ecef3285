"""Spare layers of a layered seed (runtime/seed_spares.py, SEED_SPARES): made ahead with the seed's files copied into
them, taken by a new preview or a reset, removed with the preview that took them, and bounded by SEED_CACHE_GB.

Without the engine: which spares `sweep` keeps and removes, and when one more fits. With it (real PostgreSQL
stand-in, Docker, nginx, the service under uvicorn): a spare made after the first preview holds every file of the
seed, the second preview and a reset start on one, their data are their own, and nothing of a spare is left once
the previews close; a MySQL preview on a spare gets its own database name and password (RENAME TABLE moves files
already in the layer)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from databases import postgres
from orchestrator.common.host_env import HostEnv
from orchestrator.plugin_api import OWNER_LABEL
from orchestrator.plugin_api.types import DatabaseSeed
from orchestrator.runtime.data_seeds import DataSeeds
from orchestrator.runtime.seed_catalogue import SeedInfo, free_spares, record_seed, seeds_check
from orchestrator.runtime.seed_layers import HELD_LABEL, HOLDER_LABEL, LAYER_VOLUME_LABEL, release_holders, spare_prefix
from orchestrator.runtime.seed_spares import SPARE_LABEL, SeedSpares
from tests.support import web
from tests.support.git_repos import make_pr_repo
from tests.support.live import wait_until
from tests.support.stack import SLUG, Stack, start_stack, stop_stack
from tests.test_data_seeds import BASE, DUMP_A, MYSQL_DUMP, mysql, seeded_repo, sql

MB = 2**20
PROJECT = Path(__file__).resolve().parent.parent


class ListingEngine:
    """The docker calls `sweep` and `take` make: the spare volumes listed, the overlay volumes' layer labels, and
    `volume rm` recorded."""

    def __init__(self, spares: list[str], named: list[str]) -> None:
        self.spares = spares
        self.named = named
        self.removed: list[str] = []

    def command(self, argv: list[str], *_: object) -> str:
        if argv[:2] == ["volume", "ls"] and f"label={SPARE_LABEL}" in argv:
            return "\n".join(name for name in self.spares if name not in self.removed)
        if argv[:2] == ["volume", "ls"] and f"label={LAYER_VOLUME_LABEL}" in argv:
            return "\n".join(self.named)
        if argv[:2] == ["volume", "rm"]:
            self.removed.append(argv[-1])
        return ""

    def volume_exists(self, name: str) -> bool:
        return name in self.spares and name not in self.removed


def mark(marker: Path, made: float, size: int) -> None:
    """A free spare's marker: the restore of its seed it was made on, and its measured size."""
    marker.write_text(json.dumps({"madeAt": repr(made), "bytes": size}))


def seed_info(key: str, size: int, used: float) -> SeedInfo:
    return SeedInfo(key=key, repository="github/acme/shop", source="file a.sql", image="postgres:16", size_bytes=size,
                    made_at=used, seconds=1.0, used_at=used)


def test_sweep_keeps_free_spares_that_fit_and_removes_every_other_unless_taken_or_being_made(tmp_path: Path) -> None:
    env = HostEnv.for_state_dir(tmp_path)
    prefix = spare_prefix(env)
    data = tmp_path / "database-seeds" / "data"
    now = time.time()
    for key, size, age in (("a" * 20, 300 * MB, 0), ("b" * 20, 300 * MB, 60)):  # "a…" used last
        record_seed(data, seed_info(key, size, now - age))
        os.utime(data / f"{key}.json", (now - age, now - age))
    free_a, free_b, taken, halfway, gone = (f"{prefix}{'a' * 20}-00000001", f"{prefix}{'b' * 20}-00000002",
                                            f"{prefix}{'a' * 20}-00000003", f"{prefix}{'b' * 20}-00000004",
                                            f"{prefix}{'c' * 20}-00000005")
    engine = ListingEngine([free_a, free_b, taken, halfway, f"{halfway}-view", gone], named=[taken])
    seeds = DataSeeds(env, tmp_path, engine, cache_bytes=1000 * MB, unused_days=7)  # type: ignore[arg-type]
    spares = SeedSpares(env, tmp_path, engine, seeds, count=1)  # type: ignore[arg-type]
    markers = tmp_path / "database-seeds" / "spares"
    markers.mkdir(parents=True)
    for name, made in ((free_a, now), (free_b, now - 60), (gone, now)):
        mark(markers / name, made, 300 * MB)
    assert free_spares(tmp_path) == {"a" * 20: 1, "b" * 20: 1, "c" * 20: 1}
    assert "2 repository seeds, 0.59 GB, and 2 spares, 0.59 GB" in seeds_check(tmp_path, 1000 * MB).detail

    # 1000 MB: the seeds take 600, one spare (of the seed used last) fits beside them, the other does not.
    assert sorted(spares.sweep()) == sorted([free_b, halfway, f"{halfway}-view", gone])
    assert spares.free() == [free_a] and taken not in engine.removed  # a preview's overlay names it
    assert not spares._fits("a" * 20) and not spares._fits("c" * 20)  # full; and no seed "c…" at all

    # Taken: no longer free, and kept by `sweep` until the preview's overlay names it (settle).
    assert spares.take("a" * 20) == free_a and spares.take("a" * 20) is None and spares.free() == []
    assert spares.sweep() == []
    spares.settle(free_a)
    assert spares.sweep() == [free_a]  # no overlay names it: a failed layering, or its preview is gone

    # One being made is left alone; one made on an earlier restore of its seed is not; with room, one more fits.
    building, earlier = f"{prefix}{'b' * 20}-00000006", f"{prefix}{'a' * 20}-00000007"
    engine.spares += [building, earlier]
    mark(markers / earlier, now - 3600, 300 * MB)
    spares._building.add(building)
    assert spares.sweep() == [earlier] and spares.take("a" * 20) is None
    seeds.cache_bytes = 2000 * MB
    assert spares._fits("a" * 20)

    # Never more than SEED_SPARES free spares of a seed (the setting lowered); none taken with SEED_SPARES=0.
    second_a = f"{prefix}{'a' * 20}-00000008"
    engine.spares, engine.removed = [building, free_a, second_a], []
    mark(markers / free_a, now, 300 * MB)
    mark(markers / second_a, now, 300 * MB)
    assert spares.sweep() == [second_a] and spares.free() == [free_a]
    spares.count = 0
    assert spares.take("a" * 20) is None and spares.free() == [free_a]
    assert spares.sweep() == [free_a]


def test_no_spare_for_a_seed_that_is_not_layered_or_when_spares_are_off(tmp_path: Path) -> None:
    env = HostEnv.for_state_dir(tmp_path)
    engine = ListingEngine([], [])
    seeds = DataSeeds(env, tmp_path, engine, cache_bytes=1000 * MB, unused_days=7)  # type: ignore[arg-type]
    seed = DatabaseSeed(volume="db-data", path="/data", environment={}, ready=["true"], command=["true"], script="",
                        layered=False)
    SeedSpares(env, tmp_path, engine, seeds, count=1).refill("a" * 20, "sha256:1", seed)  # type: ignore[arg-type]
    SeedSpares(env, tmp_path, engine, seeds, count=0).refill(  # type: ignore[arg-type]
        "a" * 20, "sha256:1", seed.model_copy(update={"layered": True}))
    assert not [t for t in __import__("threading").enumerate() if t.name == "seed-spare"]


def test_holders_go_with_their_deployment_and_when_their_copy_is_gone() -> None:
    calls: list[list[str]] = []

    def docker(argv: list[str], **_: object) -> str:
        calls.append(argv)
        if argv[0] == "ps":
            return "po-hold-a_db-data\ta_db-data\npo-hold-b_db-data\tb_db-data\n"
        return "a_db-data\nc_db-data\n" if argv[:2] == ["volume", "ls"] else ""

    release_holders(docker, HELD_LABEL)  # b's copy is gone: its holder goes, a's stays
    assert [argv[-1] for argv in calls if argv[0] == "rm"] == ["po-hold-b_db-data"]
    assert sum(argv[:2] == ["volume", "ls"] for argv in calls) == 1  # one listing, whatever the holders
    calls.clear()
    release_holders(docker, f"{HOLDER_LABEL}=a")  # a deployment's removal: all it lists
    assert [argv[-1] for argv in calls if argv[0] == "rm"] == ["po-hold-a_db-data", "po-hold-b_db-data"]


# With the engine ---------------------------------------------------------------------------------------------


def docker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120)


def free(stack: Stack) -> list[str]:
    directory = stack.root / "state" / "database-seeds" / "spares"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def spare_volumes(stack: Stack) -> list[str]:
    marker = HostEnv.for_state_dir(stack.root / "state").marker
    return sorted(docker("volume", "ls", "-q", "--filter", f"label={OWNER_LABEL}={marker}",
                         "--filter", f"label={SPARE_LABEL}").stdout.split())


def mountpoint(volume: str) -> Path:
    return Path(docker("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip())


def layer_named(volume: str) -> str:
    return docker("volume", "inspect", "--format", f'{{{{index .Labels "{LAYER_VOLUME_LABEL}"}}}}', volume
                  ).stdout.strip()


def files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    started = start_stack(tmp_path, SEED_CACHE_GB="2", ALLOWED_REPOS="Codertocat/Hello-World")
    yield started
    stop_stack(started)


def kept_warm(page: str) -> list[list[str]]:
    """The dashboard's "Kept warm" table: repository, what, how many, per row."""
    table = page.split('<table id="pools"', 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td[^>]*>([^<]*)</td>", row)[:3] for row in table.split("<tr>")[2:]]


@pytest.mark.docker
@pytest.mark.live
def test_previews_and_resets_start_on_spares_holding_the_seed_s_files(stack: Stack) -> None:
    # A restore's commands can make hard links in the data; a spare never copies them (each name would be a copy).
    link = f"ln {postgres.DATA}/PG_VERSION {postgres.DATA}/po-linked"
    repo = seeded_repo(stack, "seed/spares", {"seeds/demo.sql": DUMP_A}, {"file": "seeds/demo.sql", "commands": [link]})
    stack.send("opened", 1, repo, repo.sha_a)
    stack.wait_for(1, "running", repo.sha_a)
    assert "layered on spare" not in stack.logs(1)  # the seed was just restored: no spare yet
    assert layer_named(f"{SLUG}-1_db-data") == f"{SLUG}-1_db-data-layer"

    # Made after the first preview started: every regular file of the seed, copied into the spare's upper layer.
    wait_until(lambda: len(free(stack)) == 1, timeout=120, message="a spare made")
    [spare] = free(stack)
    assert spare_volumes(stack) == [spare]  # its view is gone
    listed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "seeds", "--json"], cwd=stack.root,
                            capture_output=True, text=True, timeout=60,
                            env={**stack.service.env, "PYTHONPATH": str(PROJECT)})
    assert [seed["spares"] for seed in json.loads(listed.stdout)] == [1], listed.stderr
    # The dashboard lists them too, as the runtime's pools of that repository
    [seed] = json.loads(listed.stdout)
    assert kept_warm(web.get(f"{stack.service.url}/dashboard", timeout=10).text) == [
        [seed["repository"], "database seed", "1"], [seed["repository"], "spare layers", "1"]]
    seed_volume = docker("volume", "inspect", "--format", '{{index .Labels "dev.preview-orchestrator.spare-of"}}',
                         spare).stdout.strip()
    seed_files, upper = files(mountpoint(seed_volume)), files(mountpoint(spare) / "upper")
    linked = {"PG_VERSION", "po-linked"}
    assert linked <= set(seed_files) and len(seed_files) > 900  # PostgreSQL's catalog and the table
    assert upper == {name: size for name, size in seed_files.items() if name not in linked}
    before = {name: digest(mountpoint(seed_volume) / name) for name in seed_files}
    assert {name: digest(mountpoint(spare) / "upper" / name) for name in upper} == \
        {name: before[name] for name in upper}

    # The second preview starts on it: its overlay names the spare, and its data are its own.
    stack.send("opened", 2, repo, repo.sha_a)
    stack.wait_for(2, "running", repo.sha_a)
    assert f"database layered on spare {spare}" in stack.logs(2)
    assert layer_named(f"{SLUG}-2_db-data") == spare and spare not in free(stack)
    sql(2, "insert into products values (9999, 'written by pr 2')")
    sql(1, "delete from products where id = 1")
    assert sql(1, "select count(*) from products where id in (1, 9999)") == "0"
    assert sql(2, "select count(*) from products where id in (1, 9999)") == "2"
    assert {name: digest(mountpoint(seed_volume) / name) for name in seed_files} == before  # the seed unchanged

    # Another is made; reset-db starts on it, and the spare the old database was on goes with it.
    wait_until(lambda: len(free(stack)) == 1, timeout=120, message="a second spare made")
    [second] = free(stack)
    assert second != spare
    reset = web.post(f"{stack.service.url}/api/previews/{SLUG}-2/reset-db", json={}, timeout=300)
    assert reset.status_code == 200, reset.text
    assert sql(2, "select count(*) from products where id in (1, 9999)") == "1"
    assert layer_named(f"{SLUG}-2_db-data") == second
    assert spare not in spare_volumes(stack)

    # Closing the previews leaves no spare but the free one, which a seed that goes takes along.
    wait_until(lambda: len(free(stack)) == 1, timeout=120, message="a third spare made")
    [third] = free(stack)
    for pr in (1, 2):
        stack.close(pr, repo, repo.sha_a)
    assert spare_volumes(stack) == [third]
    # The seed pruned from the engine: it is restored again, and the spare made on the old one is never used.
    assert docker("volume", "rm", seed_volume).returncode == 0
    stack.send("opened", 3, repo, repo.sha_a)
    stack.wait_for(3, "running", repo.sha_a)
    assert "restoring file seeds/demo.sql" in stack.logs(3) and "layered on spare" not in stack.logs(3)
    wait_until(lambda: third not in spare_volumes(stack) and len(free(stack)) == 1, timeout=120,
               message="the old seed's spare swept, one made on the new seed")
    stack.close(3, repo, repo.sha_a)


@pytest.mark.docker
@pytest.mark.live
def test_a_mysql_preview_and_its_reset_start_on_spares_under_their_own_names(stack: Stack) -> None:
    from databases import mysql as plugin

    config = {**BASE, "database": "mysql", "seed": {"file": "demo.sql"}}
    repo = make_pr_repo(stack.root / "repos", "go", "seed/mysql-spares", config=config, files={"demo.sql": MYSQL_DUMP})
    stack.send("opened", 8, repo, repo.sha_a)
    stack.wait_for(8, "running", repo.sha_a)
    wait_until(lambda: len(free(stack)) == 1, timeout=120, message="a spare made")
    [spare] = free(stack)
    stack.send("opened", 9, repo, repo.sha_a)
    stack.wait_for(9, "running", repo.sha_a)
    assert f"database layered on spare {spare}" in stack.logs(9)
    # The copy on the spare is pull request 9's: its database, its password, the seed's gone; its writes its own.
    assert mysql(9, "select o.id, p.name from orders o join products p on p.id = o.product").stdout.strip() == \
        "10\tfirst"
    refused = mysql(9, "select 1", password=plugin.SEED_PASSWORD)
    assert refused.returncode != 0 and "denied" in refused.stderr
    assert mysql(9, "insert into products values (4, 'by pr 9')").returncode == 0
    assert mysql(8, "select count(*) from products").stdout.strip() == "3"
    wait_until(lambda: len(free(stack)) == 1, timeout=120, message="a second spare made")
    [second] = free(stack)
    reset = web.post(f"{stack.service.url}/api/previews/{SLUG}-9/reset-db", json={}, timeout=300)
    assert reset.status_code == 200, reset.text
    assert layer_named(f"{SLUG}-9_db-data") == second
    wait_until(lambda: mysql(9, "select count(*) from products").stdout.strip() == "3", timeout=60,
               message="pull request 9's database back to the seed")
    for pr in (8, 9):
        stack.close(pr, repo, repo.sha_a)
