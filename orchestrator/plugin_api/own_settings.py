"""A plugin's own settings: read from the environment and `.env`, as the service's are, under the plugin's prefix.

A runtime or code host that needs settings of its own (the swarm's SWARM_REGISTRY, ...) declares them in a
subclass of `OwnSettings` with an `env_prefix` and reads them with `read_own_settings` when its `po_runtime` /
`po_codehost` builds it. A bad value raises SettingsError with one sentence per variable, named as the operator
writes it and never echoing its value: start-up stops and `doctor` shows the sentences.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.common.urls import http_url
from orchestrator.settings import SettingsError, describe_errors


class OwnSettings(BaseSettings):
    """The base of a plugin's settings: set `model_config = SettingsConfigDict(env_prefix="YOURS_", ...)` in the
    subclass (the base's `.env` reading and leniency about other variables are kept)."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore",
                                      case_sensitive=False)

    def secret_values(self) -> list[str]:
        """The values of its SecretStr fields that are set: masked in logs and deployment logs."""
        return [value.get_secret_value() for value in self.__dict__.values()
                if isinstance(value, SecretStr) and value.get_secret_value()]


class ServerHostSettings(OwnSettings):
    """A self-hosted code host's settings (Gitea's GITEA_*, GitLab's GITLAB_*): its server's address, an API token
    and the webhook secret; on when the secret is set, which then needs the address. Subclasses set the prefix."""

    url: str | None = None
    token: SecretStr = SecretStr("")
    webhook_secret: SecretStr = SecretStr("")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value)

    @model_validator(mode="after")
    def _url_when_on(self) -> ServerHostSettings:
        prefix = str(self.model_config.get("env_prefix") or "")
        if self.webhook_secret.get_secret_value() and not self.url:
            raise ValueError(f"{prefix}URL is required when {prefix}WEBHOOK_SECRET is set (the server's address, "
                             f"e.g. https://{prefix.rstrip('_').lower()}.example.com)")
        return self

    @property
    def on(self) -> bool:
        return bool(self.webhook_secret.get_secret_value())


Own = TypeVar("Own", bound=OwnSettings)


def read_own_settings(model: type[Own], **overrides: Any) -> Own:
    """`model` read from the environment (`overrides`, by field name, win: for tests); SettingsError names each
    bad variable with the model's prefix."""
    try:
        return model(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, str(model.model_config.get("env_prefix") or ""))) from None
