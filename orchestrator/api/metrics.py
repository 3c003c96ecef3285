"""GET /metrics: the Prometheus text exposition."""

from __future__ import annotations

from falcon.asgi import Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from orchestrator.metrics import Metrics


class MetricsResource:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def on_get(self, req: Request, resp: Response) -> None:
        resp.content_type = CONTENT_TYPE_LATEST
        resp.data = self._metrics.exposition()
