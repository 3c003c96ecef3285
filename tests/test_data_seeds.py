"""A repository's seed (preview-config.yml `seed`, runtime/data_seeds.py): its dump restored once, every preview
starting from its own copy.

Without the engine: the `seed` section's checks, which dump a database restores with what, the error lines a
failure shows, what a seed is keyed by, and eviction. With it (real PostgreSQL stand-in, Docker, nginx, the
service under uvicorn): a repository's dump and an operator's snapshot with anonymising commands, two previews
writing to their copies unseen by each other, a push that changes the dump, reset-db, a broken dump's error line
in the comment, eviction at the size bound, and a second repository with the same dump getting its own seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from databases import postgres
from orchestrator.common.commands import CommandFailed
from orchestrator.common.host_env import HostEnv
from orchestrator.plugin_api.preview_config import ConfigError, KnownNames, parse_preview_config
from orchestrator.plugin_api.types import DataSeed
from orchestrator.rendering.compose_file import make_context
from orchestrator.rendering.plugin_host import PluginHost
from orchestrator.runtime.data_seeds import DataSeeds
from orchestrator.runtime.seed_containers import error_lines
from orchestrator.runtime.seed_dumps import content_key, seed_key
from orchestrator.state.records import DeploymentRecord, event_for_record
from tests.support import web
from tests.support.git_repos import PullRequestRepo, make_pr_repo
from tests.support.live import wait_until
from tests.support.stack import SLUG, Stack, remove_seeds, start_stack, stop_stack

PROJECT = Path(__file__).resolve().parent.parent
KNOWN = KnownNames(frameworks=frozenset({"go"}), databases=frozenset({"postgres"}), services=frozenset())
BASE = {"framework": "go", "database": "postgres", "health_check_path": "/health", "app_port": 8080,
        "app_port_env": "PORT", "app_entrypoint": "/app/server"}
DUMP_A = "CREATE TABLE products (id int PRIMARY KEY, name text);\n" \
         "INSERT INTO products SELECT g, 'product ' || g FROM generate_series(1, 500) g;\n"
DUMP_B = "CREATE TABLE products (id int PRIMARY KEY, name text);\n" \
         "INSERT INTO products SELECT g, 'v2 product ' || g FROM generate_series(1, 700) g;\n"
BROKEN = "CREATE TABLE products (id int PRIMARY KEY, name text);\nINSERT INTO products VALUES (1, 'a'\n;\n"
SNAPSHOT = "CREATE TABLE users (id int PRIMARY KEY, email text);\n" \
           "INSERT INTO users VALUES (1, 'alice@real.example'), (2, 'bob@real.example');\n"
ANONYMISE = "psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -c \"UPDATE users SET email = 'user' || id || '@example.test'\""


def seed_config(seed: object) -> object:
    try:
        return parse_preview_config({**BASE, "seed": seed}, KNOWN).seed
    except ConfigError as exc:
        return exc.problems


def test_the_seed_section_takes_a_file_or_a_snapshot_and_says_what_is_wrong() -> None:
    assert seed_config({"file": "seeds/demo.sql", "commands": ["echo ok"]}).file == "seeds/demo.sql"  # type: ignore[union-attr]
    assert seed_config({"snapshot": "nightly.dump"}).source == "snapshot nightly.dump"  # type: ignore[union-attr]
    assert seed_config({}) == ["seed is not valid (needs exactly one of `file` (a dump in the repository) and "
                               "`snapshot`)"]
    assert seed_config({"file": "a.sql", "snapshot": "b.sql"}) == seed_config({})
    assert seed_config({"file": "../other/seed.sql"}) == ["seed.file is not valid (must be a relative path inside "
                                                          "the repository)"]
    assert seed_config({"snapshot": "../acme-other/nightly.sql"})[0].startswith("seed.snapshot is not valid")  # type: ignore[index]
    assert seed_config({"snapshot": "nightly.sql", "commands": [""]})[0].startswith("seed.commands is not valid")  # type: ignore[index]
    assert seed_config({"file": "a.sql", "url": "x"}) == ["seed.url is not a known field"]


def test_postgres_restores_sql_gzipped_sql_and_custom_dumps_by_the_longest_suffix() -> None:
    wiring = postgres.po_database(database="postgres", context=make_context("acme", "shop", 7, 8001, 9001, b"k"))
    assert wiring is not None and wiring.seed is not None and wiring.seed.restore is not None
    restore = wiring.seed.restore
    assert restore.command_for("demo.sql")[0] == ".sql"  # type: ignore[index]
    assert restore.command_for("demo.SQL.gz")[0] == ".sql.gz"  # type: ignore[index]
    assert restore.command_for("nightly.dump")[1][0] == "pg_restore"  # type: ignore[index]
    assert restore.command_for("demo.csv") is None
    assert "ON_ERROR_STOP=1" in restore.formats[".sql"]
    assert restore.url.endswith(f"@127.0.0.1:{postgres.PORT}/{postgres.SEED_DATABASE}")


def test_migration_patterns_of_the_built_in_frameworks_find_their_files(host: PluginHost) -> None:
    from orchestrator.common.path_glob import matching

    changed = ["database/migrations/2024_01_01_create_users.php", "app/Models/User.php", "prisma/migrations/1_init/"
               "migration.sql", "shop/migrations/0002_price.py", "shop/migrations/__init__.py",
               "alembic/versions/abc_add.py", "migrations/20240101_init.up.sql", "src/orders/migrations/1-Add.ts",
               "internal/store/migrations/2.sql", "README.md"]
    assert matching(changed, host.migrations("laravel")) == ["database/migrations/2024_01_01_create_users.php"]
    assert matching(changed, host.migrations("python")) == ["shop/migrations/0002_price.py",
                                                            "alembic/versions/abc_add.py"]
    assert matching(changed, host.migrations("nestjs")) == ["prisma/migrations/1_init/migration.sql",
                                                            "migrations/20240101_init.up.sql",
                                                            "src/orders/migrations/1-Add.ts"]
    assert matching(changed, host.migrations("go")) == ["migrations/20240101_init.up.sql",
                                                        "internal/store/migrations/2.sql"]
    assert matching(changed, host.migrations("rust")) == ["migrations/20240101_init.up.sql"]
    assert matching(["a/b/c.sql", "ab.sql", "x/[y].sql"], ["*.sql"]) == ["ab.sql"]
    assert matching(["x/y.sql", "xy.sql"], ["x/[!z]*.sql"]) == ["x/y.sql"]


def test_error_lines_start_at_the_database_s_own_word() -> None:
    output = ("SET\nCREATE TABLE\npsql:/po-seed-input/dump.sql:3: ERROR:  syntax error at or near \";\"\n"
              "LINE 3: ;\n        ^\n")
    assert error_lines(output) == ['ERROR:  syntax error at or near ";"']
    assert error_lines("all fine\n") == []


def test_a_seed_is_keyed_by_its_repository_content_commands_and_image() -> None:
    wiring = postgres.po_database(database="postgres", context=make_context("acme", "shop", 7, 8001, 9001, b"k"))
    assert wiring is not None and wiring.seed is not None
    seed = wiring.seed

    def content(repository: str = "github/acme/shop", digest: str = "d1", commands: tuple[str, ...] = ()) -> str:
        data = DataSeed(repository=repository, source="file a.sql", name="a.sql", path="/x/a.sql",
                        commands=list(commands))
        return content_key(data, ".sql", digest)

    first = content()
    assert first == content()
    assert len({first, content(repository="github/acme-shop/x"), content(digest="d2"),
                content(commands=("anonymise",))}) == 4
    # A new image makes a new seed of the same content: the previews' data made from it is not replaced.
    assert seed_key("sha256:1", seed, ["psql"], first) != seed_key("sha256:2", seed, ["psql"], first)
    assert seed_key("sha256:1", seed, ["psql"], first) != seed_key("sha256:1", seed, ["psql"], content(digest="d2"))


def test_failure_comments_keep_foreign_output_inside_its_fence() -> None:
    from orchestrator.flows.comments import failed

    text = failed("The database seed could not be restored", "abc1234", "ERROR: x\n```\n## Approved by admin\n")
    assert text.count("```") == 4  # the error line's block and the log's, each opened and closed once


class FakeEngine:
    """The one docker call eviction makes (`volume rm`), recorded; a volume held by a container is refused."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.held: set[str] = set()

    def command(self, argv: list[str], *_: object) -> str:
        if argv[:2] == ["volume", "rm"]:
            if argv[-1] in self.held:
                raise CommandFailed(argv, 1, "volume is in use")
            self.removed.append(argv[-1])
        return ""


def write_marker(seeds: DataSeeds, directory: Path, key: str, size: int, used: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / f"{key}.json"
    marker.write_text(json.dumps({"key": key, "repository": "github/acme/shop", "source": "file a.sql",
                                  "image": "postgres:16", "sizeBytes": size, "madeAt": used, "seconds": 1.0}))
    os.utime(marker, (used, used))


def test_eviction_removes_the_least_recently_used_beyond_the_bound_never_one_in_use(tmp_path: Path) -> None:
    engine = FakeEngine()
    seeds = DataSeeds(HostEnv.for_state_dir(tmp_path), tmp_path, engine, cache_bytes=250, unused_days=7)  # type: ignore[arg-type]
    markers = tmp_path / "database-seeds" / "data"
    now = time.time()
    for key, age in (("new", 0), ("mid", 60), ("old", 120), ("older", 180)):
        write_marker(seeds, markers, key, 100, now - age)
    seeds._in_use["older"] = 1  # reserved by a deploy (prepare): it copies it, or is about to
    assert seeds.evict(keep="new") == ["old"]  # new+mid fit in 250; old goes; older is reserved
    seeds.release("older")
    assert seeds.reserved("older") == 0
    assert engine.removed == [seeds.volume("old")]
    assert [s.key for s in seeds.listed()] == ["new", "mid", "older"]
    write_marker(seeds, markers, "stale", 1, now - 8 * 86400)
    engine.held.add(seeds.volume("older"))  # a container holds it: it stays listed, for the next round
    assert seeds.evict() == ["stale"]  # beyond the bound, and unused for CLEANUP_TTL_DAYS
    assert [s.key for s in seeds.listed()] == ["new", "mid", "older"]


# With the engine ---------------------------------------------------------------------------------------------


def docker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120)


def sql(pr: int, statement: str) -> str:
    """`statement` in the preview's own database (the socket: no password), its rows as `a|b` lines."""
    done = docker("exec", f"{SLUG}-pr-{pr}-db", "psql", "-U", postgres.USER, "-d", f"pr_{pr}", "-tAc", statement)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def data_seeds(stack: Stack) -> list[dict]:
    directory = stack.root / "state" / "database-seeds" / "data"
    return [json.loads(p.read_text()) for p in directory.glob("*.json")] if directory.is_dir() else []


def data_volume(stack: Stack, key: str) -> str:
    return f"po-data-{HostEnv.for_state_dir(stack.root / 'state').marker[:12]}-{key}"


def seeded_repo(stack: Stack, name: str, files: dict[str, str], seed: dict, files_b: dict[str, str] | None = None
                ) -> PullRequestRepo:
    return make_pr_repo(stack.root / "repos", "go", name, config={**BASE, "seed": seed}, files=files,
                        files_b=files_b)


@pytest.fixture
def stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    # The bound holds one seed of this size (each ~40 MB): a second one evicts the least recently used.
    started = start_stack(tmp_path, SEED_CACHE_GB="0.06",
                          ALLOWED_REPOS="Codertocat/Hello-World,acme/other,Codertocat/Hello.World")
    yield started
    stop_stack(started)


@pytest.mark.docker
@pytest.mark.live
def test_previews_start_from_the_repository_s_seed_each_with_its_own_copy(stack: Stack) -> None:
    repo = seeded_repo(stack, "seed/a", {"seeds/demo.sql": DUMP_A}, {"file": "seeds/demo.sql"},
                       files_b={"seeds/demo.sql": DUMP_B, "migrations/0002_more.sql": "SELECT 1;\n",
                                "migrations/0003_index.sql": "SELECT 2;\n"})
    # The pull request's base branch (the fixture's `master`) is where commit A is: commit B adds two migrations.
    subprocess.run(["git", "-C", repo.clone_url, "branch", "master", repo.sha_a], check=True, capture_output=True)
    stack.send("opened", 1, repo, repo.sha_a)
    stack.wait_for(1, "running", repo.sha_a)
    assert "restoring file seeds/demo.sql" in stack.logs(1)
    [first] = data_seeds(stack)
    assert first["repository"] == "github/codertocat/hello-world" and first["source"] == "file seeds/demo.sql"
    assert sql(1, "select count(*), max(name) from products") == "500|product 99"
    assert "migration" not in stack.wait_comment(1, "Preview ready")  # commit A changes none

    # A second pull request: the seed is ready (no restore), its copy is its own.
    stack.send("opened", 2, repo, repo.sha_a)
    stack.wait_for(2, "running", repo.sha_a)
    assert f"database seed {first['key']} (file seeds/demo.sql) is ready" in stack.logs(2)
    assert "restoring" not in stack.logs(2)
    sql(2, "insert into products values (9999, 'written by pr 2')")
    sql(1, "delete from products where id = 1")
    assert sql(1, "select count(*) from products where id in (1, 9999)") == "0"
    assert sql(2, "select count(*) from products where id in (1, 9999)") == "2"

    # reset-db puts pull request 2's database back to the seed.
    reset = web.post(f"{stack.service.url}/api/previews/{SLUG}-2/reset-db", json={}, timeout=300)
    assert reset.status_code == 200, reset.text  # answered once done
    assert sql(2, "select count(*) from products where id in (1, 9999)") == "1"

    # A push that changes the dump: a new seed, and the preview's database starts from it.
    stack.send("synchronize", 1, repo, repo.sha_b)
    stack.wait_for(1, "running", repo.sha_b)
    assert "(file seeds/demo.sql or its commands changed): the database starts from the seed" in stack.logs(1)
    assert sql(1, "select count(*), min(name) from products") == "700|v2 product 1"
    assert ("This pull request changes 2 migrations: `migrations/0002_more.sql`, `migrations/0003_index.sql`."
            in stack.wait_comment(1, "Preview ready", repo.sha_b[:7]))
    assert sql(2, "select count(*) from products") == "500"  # the other preview keeps its data
    # Pull request 2 is an overlay on the first seed (PostgreSQL's copies are layered): that seed stays while it
    # exists, whatever the bound, and only what pull request 2 wrote is stored apart.
    assert docker("volume", "inspect", "--format", "{{.Options.type}}", f"{SLUG}-2_db-data").stdout.strip() == \
        "overlay"
    second = next(seed for seed in data_seeds(stack) if seed["key"] != first["key"])
    assert {seed["key"] for seed in data_seeds(stack)} == {first["key"], second["key"]}
    listed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "seeds"], cwd=stack.root, capture_output=True,
                            text=True, timeout=60, env={**stack.service.env, "PYTHONPATH": str(PROJECT)})
    assert listed.returncode == 0 and second["key"] in listed.stdout and "file seeds/demo.sql" in listed.stdout

    # A push that does not change the dump keeps the preview's own data.
    sql(1, "insert into products values (9999, 'kept')")
    updates = stack.logs(1).count("update of")
    stack.send("synchronize", 1, repo, repo.sha_b)  # the same commit again: an update of the same data
    wait_until(lambda: stack.logs(1).count("update of") > updates and
               stack.records()[f"{SLUG}-1"]["status"] == "running", timeout=120, message="updated again")
    assert sql(1, "select name from products where id = 9999") == "kept"
    for pr in (1, 2):
        stack.close(pr, repo, repo.sha_b)
    # A spare layer (seed_spares.py) beside a seed would not fit in the bound: none was made.
    assert not docker("volume", "ls", "-q", "--filter", "label=dev.preview-orchestrator.spare-of").stdout.split()

    # Once no preview is layered on them, a new seed beyond the bound evicts both (least recently used first).
    third = seeded_repo(stack, "seed/third", {"seeds/demo.sql": DUMP_A + "SELECT 3;\n"}, {"file": "seeds/demo.sql"})
    stack.send("opened", 15, third, third.sha_a)
    stack.wait_for(15, "running", third.sha_a)
    [latest] = data_seeds(stack)
    assert latest["key"] not in (first["key"], second["key"])
    for gone in (first, second):
        assert docker("volume", "inspect", data_volume(stack, gone["key"])).returncode != 0
    stack.close(15, third, third.sha_a)
    assert docker("volume", "inspect", data_volume(stack, latest["key"])).returncode == 0  # kept for the next
    remove_seeds(stack.root / "state")
    assert docker("volume", "inspect", data_volume(stack, latest["key"])).returncode != 0


@pytest.mark.docker
@pytest.mark.live
def test_snapshots_commands_broken_dumps_and_a_second_repository(stack: Stack) -> None:
    # An operator's snapshot, anonymised by the repository's commands: the copy is changed, the file is not.
    folder = stack.root / "state" / "snapshots" / SLUG
    folder.mkdir(parents=True)
    (folder / "nightly.sql").write_text(SNAPSHOT)
    snap = seeded_repo(stack, "seed/snap", {}, {"snapshot": "nightly.sql", "commands": [ANONYMISE]})
    # Until the operator's folder names its repository, no repository may read it.
    stack.send("opened", 13, snap, snap.sha_a)
    assert "does not name this repository in its .repository file" in stack.wait_for(13, "failed")["error"]
    stack.close(13, snap, snap.sha_a)
    (folder / ".repository").write_text("Codertocat/Hello-World\n")
    # Another repository whose name gives the same slug cannot read it either.
    stack.send("opened", 14, snap, snap.sha_a, repository="Codertocat/Hello.World")
    assert "belongs to another repository" in stack.wait_for(14, "failed")["error"]
    stack.send("closed", 14, snap, snap.sha_a, repository="Codertocat/Hello.World")
    stack.wait_gone(14)
    stack.send("opened", 3, snap, snap.sha_a)
    stack.wait_for(3, "running", snap.sha_a)
    assert sql(3, "select email from users order by id") == "user1@example.test\nuser2@example.test"
    assert (folder / "nightly.sql").read_text() == SNAPSHOT
    # The commands run without the service's environment: none of its settings reach them.
    env = docker("exec", f"{SLUG}-pr-3-db", "env").stdout
    assert "CODEHOST_TOKEN" not in env and "CODEHOST_WEBHOOK_SECRET" not in env

    # A snapshot the operator does not keep: a clear failure, nothing restored.
    missing = seeded_repo(stack, "seed/missing", {}, {"snapshot": "absent.sql"})
    stack.send("opened", 4, missing, missing.sha_a)
    assert "the operator keeps no snapshot absent.sql" in stack.wait_for(4, "failed")["error"]

    # A broken dump: the deploy fails with the database's own error line in the comment.
    broken = seeded_repo(stack, "seed/broken", {"seeds/demo.sql": BROKEN}, {"file": "seeds/demo.sql"})
    stack.send("opened", 5, broken, broken.sha_a)
    assert stack.wait_for(5, "failed")["error"] == "The database seed could not be restored"
    comment = stack.wait_comment(5, "The database seed could not be restored")
    assert "ERROR:  syntax error at end of input" in comment or "ERROR:  syntax error at or near" in comment
    assert docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={SLUG}-5",
                  "--filter", "label=com.docker.compose.service=db").stdout.strip() == ""  # never started empty

    # A second repository with the same dump gets a seed of its own: never the first's.
    first = seeded_repo(stack, "seed/first", {"seeds/demo.sql": DUMP_A}, {"file": "seeds/demo.sql"})
    stack.send("opened", 6, first, first.sha_a)
    stack.wait_for(6, "running", first.sha_a)
    stack.send("opened", 7, first, first.sha_a, repository="acme/other")
    other = wait_other(stack, 7)
    keys = {seed["repository"]: seed["key"] for seed in data_seeds(stack)}
    assert other == "running" and "github/acme/other" in keys  # restored for it, not taken from the first
    assert "restoring file seeds/demo.sql" in web.get(
        f"{stack.service.url}/api/previews/acme-other-7/logs", timeout=10).text
    for pr, repo in ((3, snap), (4, missing), (5, broken), (6, first)):
        stack.close(pr, repo, repo.sha_a)
    stack.send("closed", 7, first, first.sha_a, repository="acme/other")


def wait_other(stack: Stack, pr: int) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        record = stack.records().get(f"acme-other-{pr}")
        if record and record["status"] in ("running", "failed"):
            return str(record["status"])
        time.sleep(0.5)
    raise AssertionError("the second repository's preview did not settle")


def test_no_repository_compose_file_can_name_a_seed_s_volume(tmp_path: Path) -> None:
    from orchestrator.rendering.compose_policy import normalized_problems, raw_problems

    seed_volume = DataSeeds(HostEnv.for_state_dir(tmp_path), tmp_path, FakeEngine(), 1, 1).volume("0" * 24)  # type: ignore[arg-type]
    services = {"app": {"image": "x", "volumes": ["data:/data"]}}
    for volume in ({"name": seed_volume}, {"external": True, "name": seed_volume}):
        document = {"services": services, "volumes": {"data": volume}}
        problems = raw_problems(document, tmp_path, "compose.preview.yml") + normalized_problems(
            document, tmp_path, "acme-other-7", "compose.preview.yml")
        assert any(seed_volume in problem or "external" in problem for problem in problems), problems


MYSQL_DUMP = "CREATE TABLE products (id int PRIMARY KEY, name varchar(40));\n" \
             "INSERT INTO products VALUES (1, 'first'), (2, 'second'), (3, 'third');\n" \
             "CREATE TABLE orders (id int PRIMARY KEY, product int,\n" \
             "  FOREIGN KEY (product) REFERENCES products (id));\n" \
             "INSERT INTO orders VALUES (10, 1);\n"
A_VIEW = "CREATE VIEW cheap AS SELECT id FROM products WHERE id < 3;\n"
MYSQL_BROKEN = "CREATE TABLE products (id int PRIMARY KEY);\nINSERT INTO products VALUES (1,\n"


def mysql(pr: int, statement: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    """`statement` in the preview's database over TCP as `preview`, as its app connects."""
    container = f"{SLUG}-pr-{pr}-db"
    if password is None:
        env = json.loads(docker("inspect", "--format", "{{json .Config.Env}}", container).stdout)
        password = next(item.split("=", 1)[1] for item in env if item.startswith("MYSQL_PASSWORD="))
    return docker("exec", "-e", f"MYSQL_PWD={password}", container, "mysql", "--protocol=TCP", "-h", "127.0.0.1",
                  "-u", "preview", f"pr_{pr}", "-N", "-B", "-e", statement)


@pytest.mark.docker
@pytest.mark.live
def test_mysql_previews_start_from_seeds_empty_or_the_repository_s(stack: Stack) -> None:
    from databases import mysql as plugin

    config = {**BASE, "database": "mysql"}
    # A repository's dump: restored once, each preview's copy its own, under its own password and pr_<N>.
    repo = make_pr_repo(stack.root / "repos", "go", "seed/mysql", config={**config, "seed": {"file": "demo.sql"}},
                        files={"demo.sql": MYSQL_DUMP})
    for pr in (8, 9):
        stack.send("opened", pr, repo, repo.sha_a)
        stack.wait_for(pr, "running", repo.sha_a)
    assert "restoring file demo.sql" in stack.logs(8) and "restoring" not in stack.logs(9)
    assert mysql(8, "select count(*) from products").stdout.strip() == "3"
    assert mysql(9, "select o.id, p.name from orders o join products p on p.id = o.product").stdout.strip() == \
        "10\tfirst"
    assert mysql(8, "insert into products values (4, 'by pr 8')").returncode == 0
    assert mysql(9, "select count(*) from products").stdout.strip() == "3"
    refused = mysql(9, "select 1", password=plugin.SEED_PASSWORD)
    assert refused.returncode != 0 and "denied" in refused.stderr
    assert mysql(9, "show databases like 'seed'").stdout.strip() == ""
    # An overlay on the seed (DatabaseSeed.layered): RENAME TABLE into pr_<N> moved the tables' files into its layer.
    assert docker("volume", "inspect", "--format", "{{.Options.type}}", f"{SLUG}-9_db-data").stdout.strip() == \
        "overlay"

    # A broken dump: the database's own error line in the comment.
    broken = make_pr_repo(stack.root / "repos", "go", "seed/mysql-broken",
                          config={**config, "seed": {"file": "demo.sql"}}, files={"demo.sql": MYSQL_BROKEN})
    stack.send("opened", 12, broken, broken.sha_a)
    assert stack.wait_for(12, "failed")["error"] == "The database seed could not be restored"
    assert "You have an error in your SQL syntax" in stack.wait_comment(12, "could not be restored")

    # A seed with a view: a copy cannot carry it (it names the seed's database), so the deploy fails and says why.
    viewed = make_pr_repo(stack.root / "repos", "go", "seed/mysql-view",
                          config={**config, "seed": {"file": "demo.sql"}}, files={"demo.sql": MYSQL_DUMP + A_VIEW})
    stack.send("opened", 16, viewed, viewed.sha_a)
    assert stack.wait_for(16, "failed")["error"] == "The database seed could not be copied"
    assert "the seed has views, triggers, routines or events" in stack.wait_comment(16, "could not be copied")

    # Without a `seed`: the first preview of the image makes an empty seed in the background, the next copies it.
    plain = make_pr_repo(stack.root / "repos", "go", "seed/mysql-plain", config=config)
    stack.send("opened", 10, plain, plain.sha_a)
    stack.wait_for(10, "running", plain.sha_a)
    markers = stack.root / "state" / "database-seeds"
    deadline = time.monotonic() + 180
    while not [p for p in markers.iterdir() if p.is_file()] and time.monotonic() < deadline:
        time.sleep(0.5)
    stack.send("opened", 11, plain, plain.sha_a)
    stack.wait_for(11, "running", plain.sha_a)
    assert "database volume copied from seed" in stack.logs(11)
    assert mysql(11, "create table t (x int); insert into t values (1); select count(*) from t").stdout.strip() == "1"
    for pr, pulled in ((8, repo), (9, repo), (10, plain), (11, plain), (12, broken), (16, viewed)):
        stack.close(pr, pulled, pulled.sha_a)


def seed_step(tmp_path: Path, seed: dict, database: str = "postgres", seedable: bool = True,
              repository_owned: bool = False, repository: str = "Codertocat/Hello-World",
              head: str | None = None, codehost: str = "github", event: object = None) -> object:
    """DataSteps.seed for a checkout in `tmp_path/work` and SNAPSHOTS_DIR `tmp_path/snapshots`: the DataSeed,
    or StepFailed's message."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from orchestrator.common.deployment_log import DeploymentLog
    from orchestrator.flows.context import StepFailed, Target
    from orchestrator.flows.data_steps import DataSteps
    from orchestrator.rendering.compose_document import RenderedDeployment
    from orchestrator.state.records import PullRequestEvent

    owner, name = repository.split("/")
    event = event or PullRequestEvent(
        delivery_id="d", action="opened", deployment_id=f"{SLUG}-4", project_slug=SLUG, repo_owner=owner,
        repo_name=name, pr_number=4, received_at=datetime.now(UTC), head_repo_full_name=head or repository,
        codehost=codehost)
    work = tmp_path / "work"
    target = Target(f"{SLUG}-4", SLUG, 4, work, tmp_path / "git", DeploymentLog(tmp_path / "log"))
    config = parse_preview_config({**BASE, "database": database, "seed": seed}, KNOWN_ALL)
    wiring = postgres.po_database(database="postgres", context=make_context("a", "b", 4, 8001, 9001, b"k"))
    rendered = RenderedDeployment(compose_file="x", compose={}, repository_owned=repository_owned,
                                  seed=wiring.seed if seedable and wiring else None)
    steps = DataSteps(SimpleNamespace(settings=SimpleNamespace(snapshots_path=tmp_path / "snapshots")))  # type: ignore[arg-type]
    try:
        return steps.seed(event, target, config, rendered)
    except StepFailed as exc:
        return exc.message


KNOWN_ALL = KnownNames(frameworks=frozenset({"go"}), databases=frozenset({"postgres", "mongodb"}),
                       services=frozenset())


def test_a_seed_the_preview_cannot_have_is_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "work" / "seeds").mkdir(parents=True)
    (tmp_path / "work" / "seeds" / "demo.sql").write_text(DUMP_A)
    (tmp_path / "work" / "seeds" / "linked.sql").symlink_to(tmp_path / "work" / "seeds" / "demo.sql")
    found = seed_step(tmp_path, {"file": "seeds/demo.sql"})
    assert isinstance(found, DataSeed) and found.name == "demo.sql" and found.repository == \
        "github/codertocat/hello-world"
    assert seed_step(tmp_path, {"file": "seeds/linked.sql"}) == \
        "seed.file is not valid (seeds/linked.sql is not a file in the repository)"  # never a link, even inside
    assert seed_step(tmp_path, {"file": "seeds/demo.sql"}, database="mongodb", seedable=False) == \
        "seed is not valid (the mongodb database cannot be seeded)"
    assert seed_step(tmp_path, {"file": "seeds/demo.sql"}, seedable=False, repository_owned=True) == \
        "seed is not valid (the postgres database of a repository compose file cannot be seeded)"


def test_a_snapshot_folder_serves_only_the_repository_it_names(tmp_path: Path) -> None:
    folder = tmp_path / "snapshots" / SLUG
    folder.mkdir(parents=True)
    (folder / "nightly.sql").write_text(SNAPSHOT)
    (folder / "latest.sql").symlink_to(folder / "nightly.sql")  # the operator's own link is followed
    unnamed = seed_step(tmp_path, {"snapshot": "nightly.sql"})
    assert "does not name this repository in its .repository file" in str(unnamed)
    (folder / ".repository").write_text("# the shop\nCodertocat/Hello-World\n")
    found = seed_step(tmp_path, {"snapshot": "latest.sql"})
    assert isinstance(found, DataSeed) and found.name == "latest.sql" and found.path == str(folder / "nightly.sql")
    assert "belongs to another repository" in str(seed_step(tmp_path, {"snapshot": "nightly.sql"},
                                                            repository="Codertocat/Hello.World"))  # the same slug
    assert "keeps no snapshot absent.sql" in str(seed_step(tmp_path, {"snapshot": "absent.sql"}))
    # A fork's author is not the repository's: the operator's data is not theirs, approved or not.
    assert "a pull request from a fork cannot use the operator's snapshots" in str(
        seed_step(tmp_path, {"snapshot": "nightly.sql"}, head="mallory/Hello-World"))
    # An event the service makes from the record (a maintainer's reset-db or redeploy of an approved fork's preview)
    # carries the record's head repository: refused the same; unknown (a record from before it was kept): refused.
    for head, allowed in (("mallory/Hello-World", False), (None, False), ("Codertocat/Hello-World", True)):
        record = DeploymentRecord(
            prNumber=4, repoName="Hello-World", repoOwner="Codertocat", projectSlug=SLUG, deploymentId=f"{SLUG}-4",
            branch="b", commitSha="a" * 40, framework="go", dbType="postgres", appPort=8080, exposedAppPort=8004,
            exposedDbPort=9004, status="running", createdAt=datetime.now(UTC), updatedAt=datetime.now(UTC),
            url="http://x/", headRepository=head)
        made = seed_step(tmp_path, {"snapshot": "nightly.sql"}, event=event_for_record(record, "command", "reset"))
        assert isinstance(made, DataSeed) is allowed, (head, made)
    # `owner/name` is a repository of the default code host; another host's must be named with its host.
    gitlab = seed_step(tmp_path, {"snapshot": "nightly.sql"}, codehost="gitlab")
    assert "belongs to another repository" in str(gitlab)
    (folder / ".repository").write_text("gitlab/codertocat/hello-world\n")
    assert isinstance(seed_step(tmp_path, {"snapshot": "nightly.sql"}, codehost="gitlab"), DataSeed)


def test_the_record_keeps_the_head_repository_of_the_last_event_only(tmp_path: Path) -> None:
    """An event naming no head repository (a deleted fork, an AGit pull request) leaves the record's unknown: the
    events made from it later are refused the operator's snapshots, never let through on an older value."""
    from orchestrator.flows.records import begin
    from orchestrator.state.records import PullRequestEvent
    from orchestrator.state.store import DeploymentStore

    store = DeploymentStore(tmp_path / "deployments.json")

    def deploy(head: str | None) -> str | None:
        event = PullRequestEvent(delivery_id=f"d-{head}", action="synchronize", deployment_id=f"{SLUG}-4",
                                 project_slug=SLUG, repo_owner="Codertocat", repo_name="Hello-World", pr_number=4,
                                 received_at=datetime.now(UTC), head_repo_full_name=head)
        record = begin(store, event, None, "http://x/", 10, "limit", set)
        return event_for_record(record, "command", "reset").head_repo_full_name

    assert deploy("Codertocat/Hello-World") == "Codertocat/Hello-World"
    assert deploy(None) is None


@pytest.mark.parametrize(("head", "seed"), [(None, {"snapshot": "nightly.sql"}),
                                          ("mallory/Hello-World", {"snapshot": "nightly.sql"}),
                                          ("Codertocat/Hello-World", {"snapshot": "nightly.sql"}),
                                          ("Codertocat/Hello-World", {"snapshot": "gone.sql"}),
                                          (None, {"file": "seeds/demo.sql"})])
def test_reset_db_leaves_the_data_alone_when_the_deploy_after_it_would_refuse_the_seed(
        host: PluginHost, tmp_path: Path, head: str | None, seed: dict[str, str]) -> None:
    """A snapshot the preview may not have (a fork's, a head unknown to the record, one the operator no longer
    keeps) would fail the deploy that follows the reset: the volume is never removed for that; other seeds reset
    as before."""
    from types import SimpleNamespace

    import yaml

    from orchestrator.common.deployment_log import DeploymentLog
    from orchestrator.common.flow_control import FlowControl
    from orchestrator.flows.commands import CommandFlow
    from orchestrator.flows.context import Target
    from orchestrator.flows.handler import FlowError
    from orchestrator.rendering.compose_document import GENERATED_COMPOSE

    work = tmp_path / "work"
    work.mkdir()
    (work / "preview-config.yml").write_text(yaml.safe_dump({**BASE, "seed": seed}))
    (work / GENERATED_COMPOSE).write_text("services: {}\n")
    folder = tmp_path / "snapshots" / SLUG
    folder.mkdir(parents=True)
    (folder / ".repository").write_text("Codertocat/Hello-World\n")
    (folder / "nightly.sql").write_text(SNAPSHOT)
    resets: list[str] = []
    deploys: list[str | None] = []
    runtime = SimpleNamespace(name="compose", can_reset_database=True,
                              reset_database=lambda deployment_id, compose, log: resets.append(deployment_id))
    context = SimpleNamespace(plugins=host, runtime=runtime, codehosts={},
                              settings=SimpleNamespace(snapshots_path=tmp_path / "snapshots"),
                              target=lambda slug, pr, ident: Target(
        ident, slug, pr, work, tmp_path / "git", DeploymentLog(tmp_path / "log")))
    deploy = SimpleNamespace(run=lambda event, existing, control, restart: deploys.append(event.head_repo_full_name))
    flow = CommandFlow(context, None, deploy, None)  # type: ignore[arg-type]
    record = DeploymentRecord(
        prNumber=4, repoName="Hello-World", repoOwner="Codertocat", projectSlug=SLUG, deploymentId=f"{SLUG}-4",
        branch="b", commitSha="a" * 40, framework="go", dbType="postgres", appPort=8080, exposedAppPort=8004,
        exposedDbPort=9004, status="running", createdAt=datetime.now(UTC), updatedAt=datetime.now(UTC),
        url="http://x/", headRepository=head)
    asked = event_for_record(record, "command", "operator-reset-db-1").model_copy(
        update={"command": "reset-db", "trigger": "operator", "command_author": "operator"})
    refused = "snapshot" in seed and (head != "Codertocat/Hello-World" or seed["snapshot"] == "gone.sql")
    if refused:
        with pytest.raises(FlowError) as answer:
            flow.run(asked, record, FlowControl(timeout=60))
        assert str(answer.value).startswith("The database was not reset: seed.snapshot is not valid")
        assert resets == [] and deploys == []
    else:
        flow.run(asked, record, FlowControl(timeout=60))
        assert resets == [f"{SLUG}-4"] and deploys == [head]


def test_a_seed_container_is_awaited_until_ready_stopped_or_out_of_time() -> None:
    from orchestrator.runtime.seed_containers import await_ready

    def engine(answers: list[str], state: str = '{"Status": "running"}') -> object:
        def docker(argv: list[str], timeout: float = 60) -> str:
            if argv[0] == "exec":
                if answers.pop(0) != "ok":
                    raise CommandFailed(argv, 1, "not yet")
                return ""
            return state
        return docker

    pauses: list[float] = []
    assert await_ready(engine(["no", "no", "ok"]), "seed", ["pg_isready"], 60, pauses.append) is None
    assert len(pauses) == 2
    stopped = engine(["no"], '{"Status": "exited", "ExitCode": 3}')
    assert await_ready(stopped, "seed", ["pg_isready"], 60, pauses.append) == "exited with code 3"
    assert await_ready(engine(["no"] * 5), "seed", ["pg_isready"], -1, pauses.append) == "not ready after -1s"
