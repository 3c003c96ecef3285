"""Reading the settings at start-up: one sentence per bad variable (never its value), and the webhook secret
generated on the first start when none is set."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.common.secret_files import read_or_create
from orchestrator.settings.service import PluginSettings, Settings


class SettingsError(Exception):
    """Start-up configuration is invalid; `lines` has one human sentence per bad variable."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def load_settings(**overrides: Any) -> Settings:
    """Build settings, turning pydantic's report into one line per variable without echoing values."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc)) from None


WEBHOOK_SECRET_MISSING = "CODEHOST_WEBHOOK_SECRET is required but not set"  # noqa: S105 - a message


def load_service_settings() -> tuple[Settings, Path | None]:
    """Settings for `serve`, `doctor` and `setup-nginx`. Without CODEHOST_WEBHOOK_SECRET, a strong one is
    generated on the first start and kept in the state directory (`webhook-secret`, 0600); later starts reuse
    it. Returns the settings and that file when it is the secret's source. Other bad variables are reported
    first, and then nothing is generated."""
    try:
        return load_settings(), None
    except SettingsError as exc:
        others = [line for line in exc.lines if line != WEBHOOK_SECRET_MISSING]
        if others:  # reported alone: the secret is made once the rest is right
            raise SettingsError(others) from None
    # Only the state directory is wanted here; the real secret comes from the file.
    path = load_settings(codehost_webhook_secret="unused").state_dir / "webhook-secret"  # noqa: S106
    secret = read_or_create(path, lambda: secrets.token_hex(32).encode()).decode().strip()
    return load_settings(codehost_webhook_secret=secret), path


def load_plugin_settings(**overrides: Any) -> PluginSettings:
    try:
        return PluginSettings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc)) from None


def describe_errors(exc: ValidationError, prefix: str = "") -> list[str]:
    """pydantic's report as one sentence per variable (`prefix` + the field's name, upper case), never a value."""
    lines: list[str] = []
    for error in exc.errors(include_input=False, include_url=False):
        variable = (prefix + str(error["loc"][0])).upper() if error["loc"] else "SETTINGS"
        if error["type"] == "missing":
            lines.append(f"{variable} is required but not set")
            continue
        message = error["msg"].removeprefix("Value error, ")
        if not error["loc"]:  # a check of several variables together: its sentences name them
            lines.extend(message.split("\n"))
            continue
        lines.append(f"{variable} is not valid: {message}")
    return lines
