"""Preview Orchestrator: a preview per pull request on your own Docker host. docs/architecture.md maps the
subpackages (the layers) and the way a webhook travels through them."""

__version__ = "0.1.0"
