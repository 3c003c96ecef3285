"""Loading settings and plugins for a command, or exiting with the reason (exit 2)."""

from __future__ import annotations

import sys
from typing import NoReturn

from orchestrator.settings import Settings, SettingsError, load_service_settings, load_settings


def exit_on_settings_error(exc: SettingsError) -> NoReturn:
    for line in exc.lines:
        print(f"preview-orchestrator: configuration error: {line}", file=sys.stderr)
    raise SystemExit(2) from None


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        exit_on_settings_error(exc)


def service_settings_or_exit():  # noqa: ANN202
    try:
        return load_service_settings()
    except SettingsError as exc:
        exit_on_settings_error(exc)


def plugin_host_or_exit():  # noqa: ANN202
    from orchestrator.rendering.plugin_host import PluginError, build_plugin_host
    from orchestrator.settings import load_plugin_settings

    try:
        settings = load_plugin_settings()
        return settings, build_plugin_host(disabled=settings.preview_orchestrator_disable_plugins)
    except SettingsError as exc:
        exit_on_settings_error(exc)
    except PluginError as exc:
        print(f"preview-orchestrator: plugin error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
