"""The `preview-orchestrator` command: the parser (main), the service's commands, the repository commands and
the client of a running service."""

from orchestrator.cli.main import main

__all__ = ["main"]
