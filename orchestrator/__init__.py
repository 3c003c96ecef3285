"""Preview Orchestrator: one running preview per pull request, on your own Docker host."""

__version__ = "0.1.0"
