"""The built-in `mysql` database: MySQL 8.4 with a per-PR database `pr_<N>` and user `preview`."""

from __future__ import annotations

from orchestrator.plugin_api import DatabaseSpec, DatabaseWiring, RenderContext, database_app_env, hookimpl

NAME = "mysql"
PORT = 3306
USER = "preview"


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
            "volumes": ["db-data:/var/lib/mysql"],
            "healthcheck": {
                "test": ["CMD", "mysqladmin", "ping", "-h", "127.0.0.1", "--silent"],
                "interval": "2s", "timeout": "5s", "retries": 45, "start_period": "10s",
            },
        },
        volumes={"db-data": {}},
        app_env=database_app_env("mysql", "mysql", PORT, USER, password, name),
    )
