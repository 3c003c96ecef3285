"""Service settings, read from the environment and from `.env` in the working directory: `service` holds the
variables, `reviewers` those of routing and protection with their checks, `loading` the reading at start-up."""

from orchestrator.settings.loading import (
    WEBHOOK_SECRET_MISSING,
    SettingsError,
    describe_errors,
    load_plugin_settings,
    load_service_settings,
    load_settings,
)
from orchestrator.settings.reviewers import MAX_HOST_NAME, ReviewerSettings, protection_users, routing_problems
from orchestrator.settings.service import DEFAULT_CODEHOST, PluginSettings, Settings

__all__ = [
    "DEFAULT_CODEHOST", "MAX_HOST_NAME", "WEBHOOK_SECRET_MISSING", "PluginSettings", "ReviewerSettings", "Settings",
    "SettingsError", "describe_errors", "load_plugin_settings", "load_service_settings", "load_settings",
    "protection_users", "routing_problems",
]
