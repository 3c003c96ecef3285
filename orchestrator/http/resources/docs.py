"""GET /openapi.json and GET /api-docs (Swagger UI from the swagger-ui-bundle package, no internet)."""

from __future__ import annotations

from typing import Any

import falcon
from falcon.asgi import Request, Response

DOCS_STATIC_ROUTE = "/api-docs/static"

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Preview Orchestrator API</title>
  <link rel="stylesheet" href="{static}/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{static}/swagger-ui-bundle.js"></script>
  <script src="{static}/swagger-ui-standalone-preset.js"></script>
  <script src="{static}/api-docs-init.js"></script>
</body>
</html>
"""

# Kept out of the page so the page needs no inline script.
INIT_SCRIPT = """window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    layout: "StandaloneLayout"
  });
};
"""


class OpenApiResource:
    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document

    async def on_get(self, req: Request, resp: Response) -> None:
        resp.media = self._document


class ApiDocsResource:
    async def on_get(self, req: Request, resp: Response) -> None:
        resp.content_type = falcon.MEDIA_HTML
        resp.text = _PAGE.format(static=DOCS_STATIC_ROUTE)


class ApiDocsInitResource:
    async def on_get(self, req: Request, resp: Response) -> None:
        resp.content_type = falcon.MEDIA_JS
        resp.text = INIT_SCRIPT
