"""GET /metrics: the Prometheus exposition, negotiated from the scraper's Accept header (text or
OpenMetrics), as prometheus-client does it."""

from __future__ import annotations

from falcon.asgi import Request, Response
from prometheus_client.exposition import choose_encoder

from orchestrator.observability.metrics import Metrics


class MetricsResource:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def on_get(self, req: Request, resp: Response) -> None:
        encoder, content_type = choose_encoder(req.get_header("Accept") or "")
        resp.content_type = content_type
        resp.data = encoder(self._metrics.registry)
