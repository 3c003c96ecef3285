"""Extra service `redis`: the app gets REDIS_URL (and REDIS_HOST / REDIS_PORT)."""

from __future__ import annotations

from orchestrator.plugin_api import RenderContext, ServiceSpec, ServiceWiring, hookimpl

NAME = "redis"


@hookimpl(trylast=True)
def po_services() -> list[ServiceSpec]:
    return [ServiceSpec(name=NAME, description="Redis 7, no persistence",
                        app_variables=["REDIS_URL", "REDIS_HOST", "REDIS_PORT"])]


@hookimpl(trylast=True)
def po_extra_service(service: str, context: RenderContext) -> ServiceWiring | None:
    if service != NAME:
        return None
    return ServiceWiring(
        services={NAME: {
            "image": context.image("redis:7"),
            "command": ["redis-server", "--save", "", "--appendonly", "no"],
            "healthcheck": {"test": ["CMD", "redis-cli", "ping"], "interval": "2s", "retries": 30},
        }},
        app_env={"REDIS_URL": "redis://redis:6379/0", "REDIS_HOST": "redis", "REDIS_PORT": "6379"},
    )
