"""The seam between the inbox and the flows: what processing one pull-request event means."""

from __future__ import annotations

import importlib
import logging
from typing import Protocol

from orchestrator.models import PullRequestEvent
from orchestrator.settings import Settings

log = logging.getLogger("orchestrator.handler")


class FlowError(Exception):
    """A flow failed; the message is the spec's deployment-failure message shown to users."""


class EventHandler(Protocol):
    def handle(self, event: PullRequestEvent) -> None:
        """Run the flow for `event` to the end; raise FlowError with a user-facing message on failure.

        Called in a worker thread, one event at a time per deployment id. It may be called again for the
        same event after a crash, so it must be safe to repeat.
        """


class LoggingHandler:
    """The handler used when no deploy engine is configured: it logs each event and does nothing else."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def handle(self, event: PullRequestEvent) -> None:
        log.warning(
            "no deploy engine configured; %s for pull request %s ignored",
            event.action,
            event.pr_number,
            extra={"deploymentId": event.deployment_id},
        )


def load_handler(settings: Settings) -> EventHandler:
    """Instantiate EVENT_HANDLER (`module:callable`, called with the settings)."""
    module_name, _, attribute = settings.event_handler.partition(":")
    if not module_name or not attribute:
        raise ValueError("EVENT_HANDLER is not valid: expected module:callable")
    factory = getattr(importlib.import_module(module_name), attribute)
    handler: EventHandler = factory(settings)
    return handler
