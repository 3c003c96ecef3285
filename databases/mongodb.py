"""The built-in `mongodb` database: MongoDB 7; the user is created in `admin`, hence `authSource=admin`."""

from __future__ import annotations

from orchestrator.plugin_api import DatabaseSpec, DatabaseWiring, RenderContext, database_app_env, hookimpl

NAME = "mongodb"
PORT = 27017
USER = "preview"


@hookimpl(trylast=True)
def po_databases() -> list[DatabaseSpec]:
    return [DatabaseSpec(name=NAME, port=PORT, scheme="mongodb", description="MongoDB 7")]


@hookimpl(trylast=True)
def po_database(database: str, context: RenderContext) -> DatabaseWiring | None:
    if database != NAME:
        return None
    name, password = context.database_name, context.db_password
    return DatabaseWiring(
        service={
            "image": context.image("mongo:7"),
            "environment": {
                "MONGO_INITDB_ROOT_USERNAME": USER, "MONGO_INITDB_ROOT_PASSWORD": password,
                "MONGO_INITDB_DATABASE": name,
            },
            "volumes": ["db-data:/data/db"],
            "healthcheck": {
                # Through the network (`db`), not 127.0.0.1: while the image sets up the first start, a
                # temporary mongod listens on 127.0.0.1 only and would pass a local ping too early.
                "test": ["CMD", "mongosh", "--quiet", "--host", "db", "--eval", "db.adminCommand('ping').ok"],
                "interval": "2s", "timeout": "5s", "retries": 30, "start_period": "5s",
            },
        },
        volumes={"db-data": {}},
        app_env=database_app_env("mongodb", "mongodb", PORT, USER, password, name, "?authSource=admin"),
    )
