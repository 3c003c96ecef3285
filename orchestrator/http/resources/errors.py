"""Every error leaves the service as `{"error": "..."}`, Falcon's own 404/405/413 included."""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon
from falcon.asgi import Request, Response

from orchestrator.state.store import StoreError

log = logging.getLogger("orchestrator.http")

_FRIENDLY = {404: "Not found", 405: "Method not allowed", 413: "Request body too large"}


def error_body(message: str) -> str:
    return json.dumps({"error": message})


def serialize_http_error(req: Request, resp: Response, exception: falcon.HTTPError) -> None:
    status = int(str(exception.status).split()[0])
    message = exception.description or _FRIENDLY.get(status) or str(exception.title)
    resp.content_type = falcon.MEDIA_JSON
    resp.text = error_body(message)


async def handle_store_error(req: Request, resp: Response, exc: StoreError, params: dict[str, Any]) -> None:
    log.error("%s", exc)
    resp.status = falcon.HTTP_500
    resp.content_type = falcon.MEDIA_JSON
    resp.text = error_body(str(exc))


async def handle_unexpected(req: Request, resp: Response, exc: Exception, params: dict[str, Any]) -> None:
    log.exception("unhandled error on %s %s", req.method, req.path)
    resp.status = falcon.HTTP_500
    resp.content_type = falcon.MEDIA_JSON
    resp.text = error_body("Internal server error")


def install(app: falcon.asgi.App) -> None:
    app.set_error_serializer(serialize_http_error)
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(StoreError, handle_store_error)
