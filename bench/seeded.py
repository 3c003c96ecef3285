"""(9) Preview data: a new pull request running with a large seed, against a person restoring the same dump.

The dump is what pg_dump / mysqldump write for one table of `seeded_rows` rows with four secondary indexes (about
100 bytes a row: 3 million rows are ~300 MB of SQL), kept by the operator as a snapshot
(`SNAPSHOTS_DIR/{projectSlug}/bench.sql`) that the Go sample's preview-config.yml names as its `seed`.

Person: `docker run` of the database image, wait until it accepts connections, `psql < dump` (`mysql < dump`),
until the rows are there — what a seed script in every preview does. Service, after one restore (the first pull
request's, timed too) and once the spare layer the service makes after it is there (seed_spares.py): a new pull
request's webhook until the record says `running` and its database holds the rows; `POST
/api/previews/{id}/reset-db` (answered once done); and a new pull request of the same repository without a seed,
for the cost of the seed itself. Targets (issue 33): new PR <= 0.25 x the person's restore;
reset-db < 3 s; seeded new PR no more than 1 s slower than one without.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import Budget, scratch
from tests.support.git_repos import make_pr_repo
from tests.support.stack import SLUG, Stack, remove_seeds, start_stack, stop_stack
from tests.support.standins import STANDIN_OVERRIDES

BASE = {"framework": "go", "health_check_path": "/health", "app_port": 8080, "app_port_env": "PORT",
        "app_entrypoint": "/app/server"}
POLL_SECONDS = 0.1
NOTES = "some longer notes about this product, as a catalogue keeps them, for the bench"
LAST_ROW = "select id from products where id = %d"  # the dump's last row, by its primary key (no scan timed)


def write_dump(path: Path, database: str, rows: int) -> None:
    """One table, two secondary indexes, `rows` rows: pg_dump's COPY block, or mysqldump's extended INSERTs."""
    with path.open("w") as out:
        if database == "postgres":
            out.write("CREATE TABLE products (id bigint PRIMARY KEY, name text, price integer, notes text);\n"
                      "COPY products (id, name, price, notes) FROM stdin;\n")
            for i in range(1, rows + 1):
                out.write(f"{i}\tproduct number {i}\t{i * 37 % 10000}\t{NOTES} {i}\n")
            out.write("\\.\n")
        else:
            out.write("CREATE TABLE products (id bigint PRIMARY KEY, name varchar(64), price int,"
                      " notes varchar(128));\n")
            for start in range(1, rows + 1, 1000):
                values = ",".join(f"({i},'product number {i}',{i * 37 % 10000},'{NOTES} {i}')"
                                  for i in range(start, min(start + 1000, rows + 1)))
                out.write(f"INSERT INTO products VALUES {values};\n")  # noqa: S608 - the bench's own numbers
        for name, columns in (("name", "name"), ("price", "price"), ("notes", "notes"), ("price_name", "price, name")):
            out.write(f"CREATE INDEX products_{name} ON products ({columns});\n")


def _docker(*argv: str, stdin: Path | None = None, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    if stdin is None:
        return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout)
    with stdin.open("rb") as source:
        done = subprocess.run(["docker", *argv], stdin=source, capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def _until(check: Any, timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("not reached in time")
        time.sleep(POLL_SECONDS)


def person_restore(database: str, dump: Path, rows: int) -> float:
    """`docker run` of the database, wait for it, restore the dump through its client, until the rows are there."""
    name = f"po-bench-person-{database}-{os.getpid()}"
    if database == "postgres":
        env = ["-e", "POSTGRES_USER=preview", "-e", "POSTGRES_PASSWORD=bench", "-e", "POSTGRES_DB=app"]
        ready = ["pg_isready", "-U", "preview", "-d", "app", "-h", "127.0.0.1"]
        restore = ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-U", "preview", "-d", "app"]
        count = ["psql", "-U", "preview", "-d", "app", "-tAc", LAST_ROW % rows]
    else:
        env = ["-e", "MYSQL_DATABASE=app", "-e", "MYSQL_USER=preview", "-e", "MYSQL_PASSWORD=bench",
               "-e", "MYSQL_ROOT_PASSWORD=bench"]
        ready = ["mysqladmin", "ping", "-h", "127.0.0.1", "--silent"]
        restore = ["mysql", "--protocol=TCP", "-h", "127.0.0.1", "-uroot", "-pbench", "app"]
        count = ["mysql", "--protocol=TCP", "-h", "127.0.0.1", "-uroot", "-pbench", "app", "-N", "-e",
                 LAST_ROW % rows]
    image = STANDIN_OVERRIDES["postgres:16" if database == "postgres" else "mysql:8.4"]
    began = time.perf_counter()
    try:
        started = _docker("run", "-d", "--name", name, *env, image)
        assert started.returncode == 0, started.stderr
        _until(lambda: _docker("exec", name, *ready, timeout=30).returncode == 0, timeout=300)
        done = _docker("exec", "-i", name, *restore, stdin=dump)
        assert done.returncode == 0, done.stderr[-2000:]
        assert _docker("exec", name, *count).stdout.strip() == str(rows)
        return time.perf_counter() - began
    finally:
        _docker("rm", "--force", "--volumes", name)


def _rows(database: str, pr: int, rows: int) -> str:
    """The id of the dump's last row when the preview's database has it (by its primary key: the check must not
    cost a scan of the table, which would be timed as the service's)."""
    container = f"{SLUG}-pr-{pr}-db"
    query = LAST_ROW % rows
    if database == "postgres":
        argv = ["psql", "-U", "preview", "-d", f"pr_{pr}", "-tAc", query]
    else:
        env = _docker("inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", container).stdout
        password = next(line.split("=", 1)[1] for line in env.splitlines() if line.startswith("MYSQL_PASSWORD="))
        argv = ["mysql", "--protocol=TCP", "-h", "127.0.0.1", "-upreview", f"-p{password}", f"pr_{pr}", "-N", "-e",
                query]
    return _docker("exec", container, *argv, timeout=60).stdout.strip()


def _open(stack: Stack, repo: Any, pr: int, database: str, rows: int | None) -> float:
    began = time.perf_counter()
    stack.send("opened", pr, repo, repo.sha_a)
    _until(lambda: (stack.records().get(f"{SLUG}-{pr}") or {}).get("status") in ("running", "failed"))
    assert stack.records()[f"{SLUG}-{pr}"]["status"] == "running", stack.logs(pr)[-3000:]
    RUNNING[pr] = time.perf_counter() - began
    if rows is not None:
        _until(lambda: _rows(database, pr, rows) == str(rows), timeout=60)
    return time.perf_counter() - began


def _spare_made(stack: Stack) -> float:
    """Seconds until a free spare layer of the seed is there (made in the background a few seconds after a preview
    took one: REFILL_DELAY, then the seed's files copied; both built-in databases' copies are layered)."""
    began = time.perf_counter()
    spares = stack.root / "state" / "database-seeds" / "spares"
    _until(lambda: spares.is_dir() and any(spares.iterdir()), timeout=600)
    return time.perf_counter() - began


RUNNING: dict[int, float] = {}  # seconds to `running` of each pull request of the last run (before its rows)


def bench_database(root: Path, database: str, rows: int, own_key: bool) -> dict[str, Any]:
    dump = root / f"{database}.sql"
    write_dump(dump, database, rows)
    person = person_restore(database, dump, rows)
    stack = start_stack(root / f"stack-{database}", own_key=own_key, LOG_LEVEL="info", MAX_CONCURRENT_PREVIEWS="1000",
                        HEALTH_CHECK_INTERVAL_SECONDS="5", HEALTH_CHECK_TIMEOUT_SECONDS="60")
    try:
        folder = stack.root / "state" / "snapshots" / SLUG
        folder.mkdir(parents=True)
        (folder / ".repository").write_text("Codertocat/Hello-World\n")  # the repository the folder is for
        try:
            os.link(dump, folder / "bench.sql")  # the same file system: no second copy of a large dump
        except OSError:
            shutil.copyfile(dump, folder / "bench.sql")
        seeded = make_pr_repo(root / f"repos-{database}", "go", "bench/seeded",
                              config={**BASE, "database": database, "seed": {"snapshot": "bench.sql"}})
        plain = make_pr_repo(root / f"repos-{database}", "go", "bench/plain", config={**BASE, "database": database})
        first = _open(stack, seeded, 1, database, rows)  # the restore, once
        spare_first = _spare_made(stack)  # after the first preview started (seed_spares.py)
        _open(stack, plain, 2, database, None)  # the image's empty seed made after it
        _until(lambda: any(p.is_file() for p in (stack.root / "state" / "database-seeds").iterdir()), timeout=300)
        seeded_pr = _open(stack, seeded, 3, database, rows)
        # Nothing of the service's runs beside the next measures: the spare pull request 3 took is made again
        spare_again = _spare_made(stack)
        # Where the seeded pull request's time went, from its deployment log (stages, copy, healthchecks)
        timings = [line.split("] ", 1)[-1] for line in stack.logs(3).splitlines()
                   if any(word in line for word in ("stage ", "copied from seed", "healthcheck of", "is ready",
                                                    "running after", "spare"))]
        plain_pr = _open(stack, plain, 4, database, None)
        began = time.perf_counter()
        reset = httpx.post(f"{stack.service.url}/api/previews/{SLUG}-3/reset-db", json={}, timeout=600)
        assert reset.status_code == 200, reset.text
        _until(lambda: _rows(database, 3, rows) == str(rows), timeout=60)
        reset_s = time.perf_counter() - began
        reset_log = stack.logs(3).split("database reset", 1)[-1]
    finally:
        stop_stack(stack)
        remove_seeds(stack.root / "state")
    return {"rows": rows, "dump_mb": dump.stat().st_size / 2**20, "person_restore_s": person,
            "first_pr_restore_s": first, "new_pr_seeded_s": seeded_pr, "new_pr_without_seed_s": plain_pr,
            "reset_db_s": reset_s, "spare_made_after_first_pr_s": spare_first,
            "spare_made_again_s": spare_again, "seeded_pr_log": timings, "seeded_pr_running_s": RUNNING.get(3),
            "reset_log": [line.split("] ", 1)[-1] for line in reset_log.splitlines()
                          if any(word in line for word in ("stage ", "copied from seed", "healthcheck of", "reset",
                                                           "running after", "spare"))],
            "targets": {"new_pr_vs_person": seeded_pr / person,  # <= 0.25
                        "reset_db_s": reset_s,  # < 3
                        "seed_cost_s": seeded_pr - plain_pr}}  # <= 1


def bench_seeded(budget: Budget) -> dict[str, Any]:
    with scratch("seeded") as root:
        return {database: bench_database(root, database, budget.seeded_rows, budget.prune_engine_caches)
                for database in budget.seeded_databases}
