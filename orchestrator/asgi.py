"""`uvicorn orchestrator.asgi:app` entry point; `preview-orchestrator serve` is the usual way."""

from orchestrator.http.app import create_app

app = create_app()
