"""GET and POST /api/previews, DELETE /api/previews/{deploymentId}, POST /api/previews/{id}/reset-db and (handed
on) GET /api/previews/{id}/logs."""

from __future__ import annotations

import asyncio
import logging
import uuid

import falcon
from falcon.asgi import Request, Response
from pydantic import ValidationError

from orchestrator.common.naming import is_valid_deployment_id
from orchestrator.common.problems import describe_problems
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.events.local_previews import local_event
from orchestrator.http.resources.deployment_logs import DeploymentLogResource
from orchestrator.settings import Settings
from orchestrator.state.http_bodies import CleanupResult, LocalPreviewAccepted, LocalPreviewRequest
from orchestrator.state.records import check_owner, event_for_record
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.previews")


class PreviewListResource:
    """GET lists every preview; POST deploys a git repository of this host (`preview-orchestrator up`)."""

    def __init__(self, store: DeploymentStore, inbox: Inbox, dispatcher: Dispatcher, settings: Settings) -> None:
        self._store = store
        self._inbox = inbox
        self._dispatcher = dispatcher
        self._settings = settings

    async def on_get(self, req: Request, resp: Response) -> None:
        # The DeploymentList shape, joined from the store's cached per-record JSON (10,000 records stay fast).
        records = await asyncio.to_thread(self._store.records_json)
        resp.content_type = falcon.MEDIA_JSON
        resp.data = b'{"deployments": [' + b", ".join(records) + b"]}"

    async def on_post(self, req: Request, resp: Response) -> None:
        if not self._settings.local_previews:
            raise falcon.HTTPForbidden(description="Local previews are switched off (LOCAL_PREVIEWS=false)")
        try:
            request = LocalPreviewRequest.model_validate(await req.get_media())
            event = local_event(request)  # LocalPreviewRefused: a 400 (errors.py)
        except ValidationError as exc:
            raise falcon.HTTPBadRequest(description="Invalid request: " + describe_problems(exc)) from None
        data = await asyncio.to_thread(self._store.read)
        existing = data.deployments.get(event.deployment_id)
        check_owner(existing, event)  # DeploymentTaken: a 409 (errors.py)
        if existing is None and len(data.deployments) >= self._settings.max_concurrent_previews:
            raise falcon.HTTPConflict(description=f"Preview limit reached: {len(data.deployments)} previews "
                                      "exist (MAX_CONCURRENT_PREVIEWS)")
        await asyncio.to_thread(self._inbox.accept, event)
        log.info("local preview of %s requested", request.path, extra={"deploymentId": event.deployment_id})
        self._dispatcher.notify()
        resp.status = falcon.HTTP_202
        resp.media = LocalPreviewAccepted(
            deploymentId=event.deployment_id,
            url=self._settings.preview_url(event.project_slug, event.pr_number)).model_dump()


LOGS_SUFFIX = "/logs"
RESET_DB_SUFFIX = "/reset-db"


class PreviewResource:
    """Manual cleanup goes through the inbox like a `closed` event, so it never races a running flow.

    The route takes the rest of the path (so that a malformed id gets the 400 rather than a 404); Falcon
    cannot also route `{deploymentId}/logs`, so GET hands that suffix to the log resource here."""

    def __init__(self, store: DeploymentStore, inbox: Inbox, dispatcher: Dispatcher,
                 logs: DeploymentLogResource) -> None:
        self._store = store
        self._inbox = inbox
        self._dispatcher = dispatcher
        self._logs = logs

    async def on_get(self, req: Request, resp: Response, deployment_id: str) -> None:
        if deployment_id.endswith(RESET_DB_SUFFIX):
            raise falcon.HTTPMethodNotAllowed(["POST"])
        if not deployment_id.endswith(LOGS_SUFFIX):
            raise falcon.HTTPMethodNotAllowed(["DELETE"])
        deployment_id = deployment_id.removesuffix(LOGS_SUFFIX)
        if not is_valid_deployment_id(deployment_id):
            raise falcon.HTTPBadRequest(description="Invalid deployment id")
        await self._logs.on_get(req, resp, deployment_id)

    async def on_options(self, req: Request, resp: Response, deployment_id: str) -> None:
        resp.set_header("Allow", "GET" if deployment_id.endswith(LOGS_SUFFIX) else
                        "POST" if deployment_id.endswith(RESET_DB_SUFFIX) else "DELETE")

    async def on_post(self, req: Request, resp: Response, deployment_id: str) -> None:
        """`POST /api/previews/{id}/reset-db`: the database back to its initial state and the app restarted, as
        `/preview reset-db` does, for the operator; answered once done."""
        if not deployment_id.endswith(RESET_DB_SUFFIX):
            raise falcon.HTTPMethodNotAllowed(["GET" if deployment_id.endswith(LOGS_SUFFIX) else "DELETE"])
        # A JSON body, as for a replay: no page the operator opens can send it unasked.
        if (req.content_type or "").split(";")[0].strip().lower() != "application/json":
            raise falcon.HTTPUnsupportedMediaType(description="Content-Type must be application/json (send {})")
        deployment_id = deployment_id.removesuffix(RESET_DB_SUFFIX)
        if not is_valid_deployment_id(deployment_id):
            raise falcon.HTTPBadRequest(description="Invalid deployment id")
        record = (await asyncio.to_thread(self._store.read)).deployments.get(deployment_id)
        if record is None:
            raise falcon.HTTPNotFound(description="Deployment not found")
        event = event_for_record(record, "command", f"operator-reset-db-{uuid.uuid4()}").model_copy(
            update={"command": "reset-db", "trigger": "operator", "command_author": "operator"})
        accepted = await asyncio.to_thread(self._inbox.accept, event)
        log.info("database reset requested", extra={"deploymentId": deployment_id})
        self._dispatcher.notify()
        outcome = await self._dispatcher.wait_for(accepted.seq)
        if outcome.status == "failed":
            raise falcon.HTTPConflict(description=outcome.error or "The database could not be reset")
        resp.media = CleanupResult(message=f"Database of {deployment_id} reset").model_dump()

    async def on_delete(self, req: Request, resp: Response, deployment_id: str) -> None:
        if deployment_id.endswith(LOGS_SUFFIX):
            raise falcon.HTTPMethodNotAllowed(["GET"])
        if deployment_id.endswith(RESET_DB_SUFFIX):
            raise falcon.HTTPMethodNotAllowed(["POST"])
        if not is_valid_deployment_id(deployment_id):
            raise falcon.HTTPBadRequest(description="Invalid deployment id")
        data = await asyncio.to_thread(self._store.read)
        record = data.deployments.get(deployment_id)
        if record is None:
            raise falcon.HTTPNotFound(description="Deployment not found")
        event = event_for_record(record, "closed", f"manual-delete-{uuid.uuid4()}")
        accepted = await asyncio.to_thread(self._inbox.accept, event)
        log.info("manual cleanup requested", extra={"deploymentId": deployment_id})
        self._dispatcher.cancel(deployment_id, "the preview was removed with DELETE")
        self._dispatcher.notify()
        outcome = await self._dispatcher.wait_for(accepted.seq)
        if outcome.status == "failed":
            raise falcon.HTTPInternalServerError(description=outcome.error or "Cleanup failed")
        resp.media = CleanupResult(message=f"Preview {deployment_id} cleaned up").model_dump()

