"""The swarm runtime's own settings (SWARM_*), read when RUNTIME=swarm builds it (docs/scaling.md,
docs/configuration.md)."""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from orchestrator.plugin_api import OwnSettings

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")
_ENGINE = re.compile(r"^(unix|tcp|ssh)://\S+$")


class SwarmSettings(OwnSettings):
    model_config = SettingsConfigDict(env_prefix="SWARM_")

    # The registry every node pulls from (`host[:port][/namespace]`) and the scheme of its HTTP API (tag deletion).
    registry: str = Field(default="", validate_default=True, max_length=200,
                          pattern=r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]+)*)?$")
    registry_scheme: Literal["https", "http"] = "https"
    # The registry's credentials (htpasswd): the service pushes with them and hands them to the nodes
    # (`--with-registry-auth`); a preview's containers have none, so they can neither read nor change it.
    registry_user: str = Field(default="", max_length=100, pattern=r"^[A-Za-z0-9._-]*$")
    registry_password: SecretStr = SecretStr("")
    # The Docker engines of the nodes (`hostname=docker-host,...`): only a node's own engine removes its volumes
    # and the images it pulled.
    node_engines: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    # The registry's garbage collection (gc.py), run as an argument list on this host every
    # SWARM_REGISTRY_GC_INTERVAL_SECONDS (0: never); empty: the operator collects (docs/scaling.md).
    registry_gc_command: str = Field(default="", max_length=1000)
    registry_gc_interval_seconds: float = Field(default=86400.0, ge=0)

    @field_validator("registry")
    @classmethod
    def _required(cls, value: str) -> str:
        if not value:
            raise ValueError("must be set when RUNTIME=swarm (host:port of a registry every node can pull from)")
        return value

    @field_validator("node_engines", mode="before")
    @classmethod
    def _engines(cls, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        engines: dict[str, str] = {}
        for pair in str(value or "").split(","):
            node, sep, host = pair.strip().partition("=")
            if not pair.strip():
                continue
            if not sep or not _NODE.match(node) or not _ENGINE.match(host):
                raise ValueError(f"entry {pair.strip()[:80]!r} is not of the form hostname=unix://|tcp://|ssh://...")
            engines[node] = host
        return engines

    @field_validator("registry_gc_command")
    @classmethod
    def _command(cls, value: str) -> str:
        shlex.split(value)  # quotes that do not close are refused here, not at the first collection
        return value

    @model_validator(mode="after")
    def _credentials_together(self) -> SwarmSettings:
        if bool(self.registry_user) != bool(self.registry_password.get_secret_value()):
            raise ValueError("SWARM_REGISTRY_USER and SWARM_REGISTRY_PASSWORD are set together, or neither")
        return self

    @property
    def registry_credentials(self) -> tuple[str, str] | None:
        password = self.registry_password.get_secret_value()
        return (self.registry_user, password) if password else None
