"""The seam between the inbox and the flows: what processing one pull-request event means."""

from __future__ import annotations

import importlib
import inspect
from typing import Protocol

from orchestrator.common.flow_control import FlowControl
from orchestrator.observability.metrics import Metrics
from orchestrator.rendering.plugin_host import CodeHosts, PluginHost
from orchestrator.settings import Settings
from orchestrator.state.records import PullRequestEvent
from orchestrator.state.store import DeploymentStore


class FlowError(Exception):
    """A flow failed; the message is the spec's deployment-failure message shown to users."""


class EventHandler(Protocol):
    """Processes events. It may also define `startup(open_deployments: set[str])`, called once before the
    first event (the deploy engine reconciles there), `expired(now)` for the TTL scheduler, and `idle(now)` (previews
    to put to sleep, each with its last use) for the sleep check."""

    def handle(self, event: PullRequestEvent, control: FlowControl) -> None:
        """Run the flow for `event` to the end; raise FlowError with a user-facing message on failure.

        Called in a worker thread, one event at a time per deployment id. It may be called again for the
        same event after a crash, so it must be safe to repeat. `control` carries the flow's deadline and its
        cancellation (a `closed` event or DELETE for the same deployment): stop soon after it says so.
        """


def load_handler(settings: Settings, plugins: PluginHost, metrics: Metrics, store: DeploymentStore,
                 codehosts: CodeHosts) -> EventHandler:
    """Instantiate EVENT_HANDLER (`module:callable`, called as `factory(settings, plugins=..., metrics=...,
    store=..., codehosts=...)`; `store` and `codehosts` only when the factory takes them). The handler records
    into `metrics`, which `GET /metrics` serves, tracks previews in `store`, which the API reads, and reports to
    the pull requests' code hosts through `codehosts`."""
    module_name, _, attribute = settings.event_handler.partition(":")
    if not module_name or not attribute:
        raise ValueError("EVENT_HANDLER is not valid: expected module:callable")
    factory = getattr(importlib.import_module(module_name), attribute)
    parameters = inspect.signature(factory).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    extra = {name: value for name, value in (("store", store), ("codehosts", codehosts))
             if name in parameters or takes_all}
    handler: EventHandler = factory(settings, plugins=plugins, metrics=metrics, **extra)
    return handler
