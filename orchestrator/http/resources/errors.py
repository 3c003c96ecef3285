"""Every error leaves the service as `{"error": "..."}`, Falcon's own 404/405/413 included; the domain's errors
(another repository's deployment id, the inbox, a refused local preview) are mapped here, once."""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon
from falcon.asgi import Request, Response

from orchestrator.events.inbox import InboxError
from orchestrator.events.local_previews import LocalPreviewRefused
from orchestrator.state.records import DeploymentTaken
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


async def handle_deployment_taken(req: Request, resp: Response, exc: DeploymentTaken, params: dict[str, Any]) -> None:
    """Another repository's event holds the deployment id (their names give the same slug)."""
    raise falcon.HTTPConflict(description=exc.message)


async def handle_inbox_error(req: Request, resp: Response, exc: InboxError, params: dict[str, Any]) -> None:
    log.error("inbox: %s", exc)
    raise falcon.HTTPInternalServerError(description="Event could not be recorded")


async def handle_local_preview_refused(req: Request, resp: Response, exc: LocalPreviewRefused,
                                       params: dict[str, Any]) -> None:
    raise falcon.HTTPBadRequest(description=str(exc))


def install(app: falcon.asgi.App) -> None:
    """The domain's errors are mapped here, once: the resources read as the happy path."""
    app.set_error_serializer(serialize_http_error)
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(StoreError, handle_store_error)
    app.add_error_handler(DeploymentTaken, handle_deployment_taken)
    app.add_error_handler(InboxError, handle_inbox_error)
    app.add_error_handler(LocalPreviewRefused, handle_local_preview_refused)
