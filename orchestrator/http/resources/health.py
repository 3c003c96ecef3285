"""GET /health."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from falcon.asgi import Request, Response

from orchestrator.state.http_bodies import Health


class HealthResource:
    def __init__(self) -> None:
        self._started = time.monotonic()

    async def on_get(self, req: Request, resp: Response) -> None:
        body = Health(timestamp=datetime.now(UTC), uptime=time.monotonic() - self._started)
        resp.media = body.model_dump(mode="json")
