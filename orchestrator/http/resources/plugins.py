"""GET /api/plugins: the debug listing of loaded plugins."""

from __future__ import annotations

from falcon.asgi import Request, Response

from orchestrator.rendering.plugin_host import PluginHost


class PluginListResource:
    def __init__(self, host: PluginHost) -> None:
        self._listing = {"plugins": host.describe()}

    async def on_get(self, req: Request, resp: Response) -> None:
        resp.media = self._listing
