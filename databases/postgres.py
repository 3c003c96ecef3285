"""The built-in `postgres` database: the official image's variables, a per-PR database `pr_<N>`."""

from __future__ import annotations

from orchestrator.plugin_api import DatabaseSpec, DatabaseWiring, RenderContext, database_app_env, hookimpl

NAME = "postgres"
PORT = 5432
USER = "preview"


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
            "volumes": ["db-data:/var/lib/postgresql/data"],
            "healthcheck": {
                "test": ["CMD", "pg_isready", "-U", USER, "-d", name, "-h", "127.0.0.1"],
                "interval": "2s", "timeout": "5s", "retries": 30, "start_period": "5s",
            },
        },
        volumes={"db-data": {}},
        app_env=database_app_env("postgresql", "pgsql", PORT, USER, password, name),
    )
