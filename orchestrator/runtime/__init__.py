"""Runtimes: where a rendered preview is built and run. `compose` (this host's Docker engine) is built in; the
interface is orchestrator.plugin_api.Runtime."""
