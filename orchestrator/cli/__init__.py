"""The `preview-orchestrator` command: the parser (main.py), the service's commands (serve, doctor, setup-nginx),
the repository commands (plugins, validate, render, init) and the client of a running service."""

from orchestrator.cli.main import main

__all__ = ["main"]
