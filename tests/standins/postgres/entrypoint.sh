#!/bin/sh
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)
PGDATA=/var/lib/postgresql/data
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
    pwfile=$(mktemp) && printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile" && chown postgres "$pwfile"
    runuser -u postgres -- "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    runuser -u postgres -- "$bin/createdb" -U "$POSTGRES_USER" "$POSTGRES_DB"
    runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
mkdir -p /var/run/postgresql && chown postgres:postgres /var/run/postgresql
exec runuser -u postgres -- "$bin/postgres" -D "$PGDATA"
