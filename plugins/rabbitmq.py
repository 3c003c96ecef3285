"""Extra service `rabbitmq`: the app gets AMQP_URL / RABBITMQ_URL with per-deployment credentials."""

from __future__ import annotations

from orchestrator.plugin_api import RenderContext, ServiceSpec, ServiceWiring, hookimpl

NAME = "rabbitmq"
USER = "preview"


@hookimpl(trylast=True)
def po_services() -> list[ServiceSpec]:
    return [ServiceSpec(name=NAME, description="RabbitMQ 3",
                        app_variables=["AMQP_URL", "RABBITMQ_URL", "RABBITMQ_HOST", "RABBITMQ_PORT"])]


@hookimpl(trylast=True)
def po_extra_service(service: str, context: RenderContext) -> ServiceWiring | None:
    if service != NAME:
        return None
    url = f"amqp://{USER}:{context.db_password}@rabbitmq:5672/"
    return ServiceWiring(
        services={NAME: {
            "image": context.image("rabbitmq:3"),
            "environment": {"RABBITMQ_DEFAULT_USER": USER, "RABBITMQ_DEFAULT_PASS": context.db_password},
            "healthcheck": {"test": ["CMD", "rabbitmq-diagnostics", "-q", "ping"], "interval": "5s",
                            "retries": 30},
        }},
        app_env={"AMQP_URL": url, "RABBITMQ_URL": url, "RABBITMQ_HOST": "rabbitmq", "RABBITMQ_PORT": "5672"},
    )
