"""The flows: what processing one pull-request event means (deploy, update, cleanup, start-up reconciliation).

`build_engine` (engine.py) is the default EVENT_HANDLER; `FlowError` is how a flow says it failed."""

from orchestrator.flows.engine import DeployEngine, build_engine
from orchestrator.flows.handler import EventHandler, FlowError

__all__ = ["DeployEngine", "EventHandler", "FlowError", "build_engine"]
