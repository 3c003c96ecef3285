"""Extra service `memcached`: the app gets MEMCACHED_URL, MEMCACHED_HOST, MEMCACHED_PORT, MEMCACHE_SERVERS."""

from __future__ import annotations

from orchestrator.plugin_api import RenderContext, ServiceSpec, ServiceWiring, hookimpl

NAME = "memcached"


@hookimpl(trylast=True)
def po_services() -> list[ServiceSpec]:
    return [ServiceSpec(name=NAME, description="memcached 1.6, 64 MB",
                        app_variables=["MEMCACHED_URL", "MEMCACHED_HOST", "MEMCACHED_PORT", "MEMCACHE_SERVERS"])]


@hookimpl(trylast=True)
def po_extra_service(service: str, context: RenderContext) -> ServiceWiring | None:
    if service != NAME:
        return None
    return ServiceWiring(
        services={NAME: {"image": context.image("memcached:1.6"), "command": ["memcached", "-m", "64"]}},
        app_env={
            "MEMCACHED_URL": "memcached://memcached:11211", "MEMCACHED_HOST": "memcached",
            "MEMCACHED_PORT": "11211", "MEMCACHE_SERVERS": "memcached:11211",
        },
    )
