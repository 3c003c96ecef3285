"""The deploy engine as the service builds it (flows.build_engine, the composition root's way), for tests that
drive it in-process."""

from __future__ import annotations

from orchestrator.flows.engine import DeployEngine, build_engine
from orchestrator.observability.metrics import Metrics
from orchestrator.rendering.plugin_host import PluginHost, build_plugin_host
from orchestrator.settings import Settings
from orchestrator.state.store import DeploymentStore


def engine_for(settings: Settings, plugins: PluginHost | None = None) -> DeployEngine:
    """Built-in plugins only unless `plugins` says otherwise (a test's own runtime, say)."""
    host = plugins or build_plugin_host(load_entry_points=False)
    metrics = Metrics()
    return build_engine(settings, plugins=host, metrics=metrics, store=DeploymentStore(settings.deployments_db),
                        codehosts=host.codehosts(settings, metrics))
