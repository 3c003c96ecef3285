"""The built-in `postgres` database: the official image's variables, a per-PR database `pr_<N>`, and a seed (a
data directory initialised once per image) that a new preview's database starts from instead of running initdb.
A repository's `seed` (a plain `.sql`, a gzipped `.sql.gz`, or pg_dump's custom format `.dump`) is restored into
the seed's database once; every copy renames it to the preview's `pr_<N>`, as it does the empty one."""

from __future__ import annotations

from orchestrator.plugin_api import (
    SEED_MOUNT,
    DatabaseSeed,
    DatabaseSpec,
    DatabaseWiring,
    RenderContext,
    SeedRestore,
    database_app_env,
    hookimpl,
)

NAME = "postgres"
PORT = 5432
USER = "preview"
DATA = "/var/lib/postgresql/data"
SEED_DATABASE = "seed"
# The seed's own password never serves a preview: `script` replaces it before the copy's server first listens.
SEED_PASSWORD = "replaced-in-every-copy"  # noqa: S105 (no network while it exists)
DONE = "po-seed-done"  # printed by the script's last statement, which runs only if the others succeeded

# Restores run over the socket (trusted locally in the image) and stop at the first error, which psql prints.
PSQL = ["psql", "--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", "--username", USER, "--dbname", SEED_DATABASE]
RESTORE = SeedRestore(
    formats={
        ".sql": [*PSQL, "--file"],
        # gzip -t first: a truncated archive fails before psql runs half of it (sh has no pipefail)
        ".sql.gz": ["sh", "-c", f'gzip -t "$1" && gzip -dc "$1" | {" ".join(PSQL)}', "sh"],
        ".dump": ["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "--username", USER,
                  "--dbname", SEED_DATABASE],
    },
    url=f"postgresql://{USER}:{SEED_PASSWORD}@127.0.0.1:{PORT}/{SEED_DATABASE}",
    # No parallel workers: they need more of /dev/shm than a container's 64 MB on a large table
    finish=[*PSQL, "--command", "VACUUM (FREEZE, ANALYZE, PARALLEL 0)"],
)

# Copies the seed, then runs `script` in single-user mode (no server listening). The statements form one
# command (`-j`: up to a blank line), so one failing rolls back the others and the marker is not printed; the
# output is never shown (its STATEMENT lines hold the password), only its error lines.
COPY_AND_PERSONALISE = f"""set -eu
data="$1"
# A clone where the volume store can make one (XFS with reflink, btrfs): instant; else a copy.
reflink=$(cp --help 2>&1 | grep -q -e '--reflink' && echo --reflink=auto || true)
cp -a $reflink {SEED_MOUNT}/. "$data"/
chown postgres:postgres "$data"
chmod 700 "$data"
out=$(gosu postgres postgres --single -j -D "$data" postgres 2>&1) || true
case "$out" in *{DONE}*) exit 0 ;; esac
printf '%s\\n' "$out" | grep -E '(ERROR|FATAL|PANIC):' | sed -E 's/^.*(ERROR|FATAL|PANIC):/\\1:/' >&2 || true
exit 1
"""


@hookimpl(trylast=True)
def po_databases() -> list[DatabaseSpec]:
    return [DatabaseSpec(name=NAME, port=PORT, scheme="postgresql", description="PostgreSQL 16")]


@hookimpl(trylast=True)
def po_database(database: str, context: RenderContext) -> DatabaseWiring | None:
    if database != NAME:
        return None
    name, password = context.database_name, context.db_password
    return DatabaseWiring(
        service={
            "image": context.image("postgres:16"),
            "environment": {"POSTGRES_USER": USER, "POSTGRES_PASSWORD": password, "POSTGRES_DB": name},
            "volumes": [f"db-data:{DATA}"],
            "healthcheck": {
                "test": ["CMD", "pg_isready", "-U", USER, "-d", name, "-h", "127.0.0.1"],
                "interval": "2s", "timeout": "5s", "retries": 30, "start_period": "5s",
            },
        },
        volumes={"db-data": {}},
        app_env=database_app_env("postgresql", "pgsql", PORT, USER, password, name),
        seed=DatabaseSeed(
            volume="db-data", path=DATA,
            environment={"POSTGRES_USER": USER, "POSTGRES_PASSWORD": SEED_PASSWORD, "POSTGRES_DB": SEED_DATABASE},
            # over TCP: the image's first start runs a temporary server on the socket only
            ready=["pg_isready", "-U", USER, "-d", SEED_DATABASE, "-h", "127.0.0.1"],
            command=["sh", "-c", COPY_AND_PERSONALISE, "sh", DATA],
            script=(f"ALTER ROLE {_identifier(USER)} PASSWORD {_literal(password)};\n"
                    f"ALTER DATABASE {_identifier(SEED_DATABASE)} RENAME TO {_identifier(name)};\n"
                    f"SELECT '{DONE[:7]}' || '{DONE[7:]}';\n\n"),
            restore=RESTORE,
            layered=True,  # a copy renames a database and sets a password: catalog pages, never the tables
        ),
    )


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
