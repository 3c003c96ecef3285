"""The built-in `mysql` database: MySQL 8.4 with a per-PR database `pr_<N>` and user `preview`, and a seed (a data
directory initialised once per image, with a repository's `seed` restored into its `seed` database when it
declares one) that a new preview's database starts from instead of running its slow first start.

A copy is made the preview's by a server of its own (no network, only a socket in the container): the passwords
of `preview` and `root` replaced, the seed's tables moved into `pr_<N>` (RENAME TABLE keeps their rows, indexes
and foreign keys; a view, trigger or routine of a repository's seed names the seed's database, so a copy of one
with triggers fails and says so), and the server shut down cleanly."""

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

NAME = "mysql"
PORT = 3306
USER = "preview"
DATA = "/var/lib/mysql"
SEED_DATABASE = "seed"
SEED_PASSWORD = "replaced-in-every-copy"  # noqa: S105 (no network while it exists; every copy replaces it)
DONE = "po-seed-done"  # selected by the script's last statement, which runs only if the others succeeded

# Over TCP as root (MYSQL_ROOT_HOST's default `%`): the image's first start runs a server without a network.
# The restore is not written to a binary log (MySQL 8.4 keeps one by default): it would be as large as the dump, in
# the seed and in every copy.
MYSQL = 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD" "$(command -v mysql || command -v mariadb)" --protocol=TCP -h 127.0.0.1 ' \
        f"-uroot \"--init-command=SET SESSION sql_log_bin = 0\" {SEED_DATABASE}"
RESTORE = SeedRestore(
    formats={
        ".sql": ["sh", "-c", f'{MYSQL} < "$1"', "sh"],
        ".sql.gz": ["sh", "-c", f'gzip -t "$1" && gzip -dc "$1" | {MYSQL}', "sh"],
    },
    url=f"mysql://root:{SEED_PASSWORD}@127.0.0.1:{PORT}/{SEED_DATABASE}",
)

# Copies the seed, starts a server on the copy with a socket only, runs `script` (standard input) as root with the
# seed's password, stops the server (SIGTERM: a clean shutdown). Only error lines are printed (the script holds
# the preview's password).
COPY_AND_PERSONALISE = f"""set -eu
data="$1"
# A clone where the volume store can make one (XFS with reflink, btrfs): instant; else a copy.
reflink=$(cp --help 2>&1 | grep -q -e '--reflink' && echo --reflink=auto || true)
cp -a $reflink {SEED_MOUNT}/. "$data"/
# A layered copy's SEED_MOUNT is an empty tmpfs (root, 1777), whose owner and mode `cp -a` gave the data directory
chown mysql:mysql "$data"
chmod 750 "$data"
# Each copy its own server identity and keys (MySQL makes them again when they are missing)
rm -f "$data"/auto.cnf "$data"/*.pem
server=$(command -v mysqld || command -v mariadbd)
client=$(command -v mysql || command -v mariadb)
admin=$(command -v mysqladmin || command -v mariadb-admin)
sock=/tmp/po-copy.sock
"$server" --user=mysql --datadir="$data" --skip-networking --socket="$sock" --pid-file=/tmp/po-copy.pid \\
    >/tmp/po-copy.log 2>&1 &
pid=$!
tries=0
until "$admin" --socket="$sock" ping >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "ERROR: the server did not start on the copy" >&2
        grep -E '\\[ERROR\\]' /tmp/po-copy.log | tail -n 5 >&2 || true
        exit 1
    fi
    sleep 0.1
done
if out=$(MYSQL_PWD='{SEED_PASSWORD}' "$client" --socket="$sock" -uroot -N -B 2>&1); then status=0; else status=1; fi
kill -TERM "$pid"
wait "$pid" || true
if [ "$status" -eq 0 ]; then
    case "$out" in *{DONE}*) exit 0 ;; esac
fi
printf '%s\\n' "$out" | grep -E 'ERROR' >&2 || true
exit 1
"""


def personalise(password: str, database: str) -> str:
    """The statements that make a copy the preview's: passwords, the seed's tables moved into `database`."""
    target = _identifier(database)
    moves = ("CONCAT('`seed`.`', REPLACE(table_name, '`', '``'), '` TO " + target.replace("'", "''")
             + ".`', REPLACE(table_name, '`', '``'), '`')")
    # The service's own names and password, quoted here; the seed's table names are quoted by SQL itself.
    return (
        f"ALTER USER 'root'@'localhost' IDENTIFIED BY {_literal(password)};\n"  # noqa: S608
        f"ALTER USER IF EXISTS 'root'@'%' IDENTIFIED BY {_literal(password)};\n"
        f"ALTER USER '{USER}'@'%' IDENTIFIED BY {_literal(password)};\n"
        f"CREATE DATABASE {target};\n"
        "SET SESSION group_concat_max_len = 16777216;\n"
        f"SET @moves = (SELECT CONCAT('RENAME TABLE ', GROUP_CONCAT({moves} SEPARATOR ', ')) "
        f"FROM information_schema.tables WHERE table_schema = '{SEED_DATABASE}' "
        "AND table_type IN ('BASE TABLE', 'SYSTEM VERSIONED', 'SEQUENCE'));\n"
        "SET @moves = IFNULL(@moves, 'DO 0');\n"
        "PREPARE po_moves FROM @moves;\n"
        "EXECUTE po_moves;\n"
        "DEALLOCATE PREPARE po_moves;\n"
        f"GRANT ALL ON {target}.* TO '{USER}'@'%';\n"
        # Nothing may be left behind in the seed's database: what a copy cannot carry fails it, loudly.
        f"SELECT IF({_left('tables', 'table_schema')} + {_left('routines', 'routine_schema')} + "
        f"{_left('triggers', 'trigger_schema')} + {_left('events', 'event_schema')} = 0, "
        f"CONCAT('{DONE[:7]}', '{DONE[7:]}'), 'ERROR: the seed has views, triggers, routines or events, which a "
        "copy cannot carry');\n"
        f"DROP DATABASE `{SEED_DATABASE}`;\n"
    )


def _left(table: str, column: str) -> str:
    return f"(SELECT COUNT(*) FROM information_schema.{table} WHERE {column} = '{SEED_DATABASE}')"  # noqa: S608


@hookimpl(trylast=True)
def po_databases() -> list[DatabaseSpec]:
    return [DatabaseSpec(name=NAME, port=PORT, scheme="mysql", description="MySQL 8.4")]


@hookimpl(trylast=True)
def po_database(database: str, context: RenderContext) -> DatabaseWiring | None:
    if database != NAME:
        return None
    name, password = context.database_name, context.db_password
    return DatabaseWiring(
        service={
            "image": context.image("mysql:8.4"),
            "environment": {
                "MYSQL_DATABASE": name, "MYSQL_USER": USER, "MYSQL_PASSWORD": password,
                "MYSQL_ROOT_PASSWORD": password,
            },
            "volumes": [f"db-data:{DATA}"],
            "healthcheck": {
                "test": ["CMD", "mysqladmin", "ping", "-h", "127.0.0.1", "--silent"],
                "interval": "2s", "timeout": "5s", "retries": 45, "start_period": "10s",
            },
        },
        volumes={"db-data": {}},
        app_env=database_app_env("mysql", "mysql", PORT, USER, password, name),
        seed=DatabaseSeed(
            volume="db-data", path=DATA,
            environment={"MYSQL_DATABASE": SEED_DATABASE, "MYSQL_USER": USER, "MYSQL_PASSWORD": SEED_PASSWORD,
                         "MYSQL_ROOT_PASSWORD": SEED_PASSWORD},
            # over TCP: the image's first start runs a temporary server without a network
            ready=["mysqladmin", "ping", "-h", "127.0.0.1", "--silent"],
            command=["sh", "-c", COPY_AND_PERSONALISE, "sh", DATA],
            script=personalise(password, name),
            restore=RESTORE,
            # An overlay on the seed: the tables' files that `script`'s RENAME TABLE moves are copied into the layer,
            # the rest read from the seed; with a spare layer (SEED_SPARES) every file is in it already.
            layered=True,
        ),
    )


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
