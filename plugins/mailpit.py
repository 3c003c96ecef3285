"""Extra service `mailpit`: an SMTP catcher; the app gets SMTP_* and Laravel's MAIL_* variables."""

from __future__ import annotations

from orchestrator.plugin_api import RenderContext, ServiceSpec, ServiceWiring, hookimpl

NAME = "mailpit"


@hookimpl(trylast=True)
def po_services() -> list[ServiceSpec]:
    return [ServiceSpec(name=NAME, description="Mailpit SMTP catcher (nothing leaves the preview)",
                        app_variables=["SMTP_HOST", "SMTP_PORT", "SMTP_URL", "MAIL_MAILER", "MAIL_HOST",
                                       "MAIL_PORT"])]


@hookimpl(trylast=True)
def po_extra_service(service: str, context: RenderContext) -> ServiceWiring | None:
    if service != NAME:
        return None
    return ServiceWiring(
        services={NAME: {"image": context.image("axllent/mailpit:v1.21")}},
        app_env={
            "SMTP_HOST": "mailpit", "SMTP_PORT": "1025", "SMTP_URL": "smtp://mailpit:1025",
            "MAIL_MAILER": "smtp", "MAIL_HOST": "mailpit", "MAIL_PORT": "1025",
        },
    )
