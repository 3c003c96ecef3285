"""GET /api/deliveries (the delivery log, filtered by repository, pull request and code host) and
POST /api/deliveries/{id}/replay (process an accepted delivery's event again)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime

import falcon
from falcon.asgi import Request, Response

from orchestrator.events.delivery_log import DeliveryLog, Entry
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox
from orchestrator.http.resources.webhook import check_record_owner, queue_accepted
from orchestrator.settings import Settings
from orchestrator.state.http_bodies import DeliveryList, ReplayAccepted
from orchestrator.state.records import PullRequestEvent
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.deliveries")
MAX_LIMIT = 1000


class DeliveryListResource:
    def __init__(self, deliveries: DeliveryLog) -> None:
        self._deliveries = deliveries

    async def on_get(self, req: Request, resp: Response) -> None:
        repository = req.get_param("repository")
        if repository is not None and (len(repository) > 300 or "/" not in repository):
            raise falcon.HTTPBadRequest(description="repository must be owner/name")
        pr_number = _int(req, "pr", 1, 2**31 - 1)
        limit = _int(req, "limit", 1, MAX_LIMIT) or 100
        codehost = req.get_param("codehost")
        entries = await asyncio.to_thread(self._deliveries.list, repository, pr_number, codehost, limit)
        resp.media = DeliveryList(deliveries=entries).model_dump()


class DeliveryReplayResource:
    def __init__(self, deliveries: DeliveryLog, settings: Settings, store: DeploymentStore, inbox: Inbox,
                 dispatcher: Dispatcher) -> None:
        self._deliveries = deliveries
        self._settings = settings
        self._store = store
        self._inbox = inbox
        self._dispatcher = dispatcher

    async def on_post(self, req: Request, resp: Response, entry_id: str) -> None:
        # A JSON body (`{}` will do): a browser cannot send one to another site without asking it first (CORS), so
        # a page the operator opens cannot replay deliveries through the operator's own access to the service.
        if (req.content_type or "").split(";")[0].strip().lower() != "application/json":
            raise falcon.HTTPUnsupportedMediaType(description="Content-Type must be application/json (send {})")
        if not entry_id.isdigit() or len(entry_id) > 18:
            raise falcon.HTTPBadRequest(description="Invalid delivery id: the log's number, e.g. 42")
        found = await asyncio.to_thread(self._deliveries.kept_event, int(entry_id))
        if found is None:
            raise falcon.HTTPNotFound(description=f"Delivery {entry_id} is not in the log")
        logged, kept = found
        if kept is None:
            why = f"it was {logged.outcome}" if logged.outcome != "accepted" else "its event is no longer kept"
            raise falcon.HTTPConflict(description=f"Delivery {entry_id} cannot be replayed: {why} (only accepted "
                                                  "deliveries are)")
        repository = f"{kept.repo_owner}/{kept.repo_name}".lower()
        if repository not in self._settings.allowed_for(kept.codehost):
            raise falcon.HTTPForbidden(description="Repository not in allowed list")
        if kept.is_base and repository not in self._settings.base_for(kept.codehost):
            raise falcon.HTTPForbidden(description="Repository not in BASE_PREVIEWS: it has no base preview")
        # A new event: its own delivery id, and no `updated_at` (a replay is the operator's, never stale).
        event = kept.model_copy(update={"delivery_id": f"replay-{entry_id}-{uuid.uuid4()}", "trigger": "replay",
                                        "received_at": datetime.now(UTC), "pr_updated_at": None})
        # DeploymentTaken (another repository's preview) and InboxError: a 409 and a 500 (errors.py)
        await asyncio.to_thread(check_record_owner, self._store, event)
        await asyncio.to_thread(self._inbox.accept, event)
        log.info("replaying delivery %s (%s)", entry_id, event.action, extra={"deploymentId": event.deployment_id})
        queue_accepted(self._dispatcher, event)
        replayed = await asyncio.to_thread(self._deliveries.record, _entry(event, int(entry_id), logged.event))
        resp.status = falcon.HTTP_202
        resp.media = ReplayAccepted(deploymentId=event.deployment_id, action=event.action,
                                    deliveryId=event.delivery_id, logId=replayed).model_dump()


def _entry(event: PullRequestEvent, replay_of: int, event_name: str | None) -> Entry:
    return Entry(codehost=event.codehost, outcome="accepted", status=202, delivery_id=event.delivery_id,
                 event=event_name, repository=f"{event.repo_owner}/{event.repo_name}", pr_number=event.pr_number,
                 action=event.action, replay_of=replay_of, kept_event=event)


def _int(req: Request, name: str, low: int, high: int) -> int | None:
    value = req.get_param(name)
    if value is None:
        return None
    if not value.isdigit() or not low <= int(value) <= high:
        raise falcon.HTTPBadRequest(description=f"{name} must be a whole number from {low} to {high}")
    return int(value)
