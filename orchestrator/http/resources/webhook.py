"""POST /webhook/{codehost} (and GitHub's at the spec's /webhook/codehost): the host's plugin verifies and
parses, then validate, record durably, answer; the dispatcher does the rest."""

from __future__ import annotations

import asyncio
import logging

import falcon
from falcon.asgi import Request, Response

from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.gating import Gate
from orchestrator.events.inbox import DeploymentTaken, Inbox, InboxError
from orchestrator.events.webhook import MAX_BODY_BYTES, parse_delivery
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import CodeHost, Delivery, Ignored, WebhookRejected
from orchestrator.settings import Settings
from orchestrator.state.records import PullRequestEvent, StatusOk, foreign_repository_message
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.events.webhook")
OK = StatusOk().model_dump()
KNOWN_EVENTS = frozenset({"pull_request", "pull_request_sync", "ping", "push", "issue_comment", "pull_request_review",
                          "Merge Request Hook", "Push Hook", "Note Hook"})
OUTCOMES = {400: "invalid", 401: "unauthorized", 403: "forbidden", 409: "conflict", 413: "too_large",
            415: "unsupported_media", 500: "error"}


class WebhookResource:
    def __init__(self, host: CodeHost, settings: Settings, inbox: Inbox, dispatcher: Dispatcher, metrics: Metrics,
                 store: DeploymentStore) -> None:
        self._host = host
        self._metrics = metrics
        self._store = store
        self._allowed = settings.allowed_for(host.name)
        self._gate = Gate.of(settings)
        self._sync = settings.webhook_processing == "sync"
        self._inbox = inbox
        self._dispatcher = dispatcher

    async def on_post(self, req: Request, resp: Response) -> None:
        headers = {name.lower(): value for name, value in req.headers.items()}
        event_type = self._host.event_name(Delivery(headers, b""))  # the host's own reading (Forgejo's header too)
        # Only known event names become label values: the header is the sender's and labels must stay few.
        event_label = event_type if event_type in KNOWN_EVENTS else "other"
        try:
            await self._receive(req, resp, headers)
        except falcon.HTTPError as error:
            self._metrics.webhooks.labels(event_label, OUTCOMES.get(error.status_code, "error")).inc()
            raise
        self._metrics.webhooks.labels(event_label, resp.context.get("outcome", "accepted")).inc()

    async def _receive(self, req: Request, resp: Response, headers: dict[str, str]) -> None:
        delivery = Delivery(headers, await _read_body(req))
        try:
            foreign = self._host.claims(delivery)
            if foreign:
                raise WebhookRejected(400, f"Not a {self._host.name} delivery: {foreign}")
            self._host.verify(delivery)
            _check_content_type(req)
            parsed = parse_delivery(self._host, delivery, self._allowed, self._gate)
        except WebhookRejected as rejected:
            log.warning("webhook rejected (%s): %s", rejected.status, rejected.message)
            status = falcon.code_to_http_status(rejected.status)
            raise falcon.HTTPError(status, description=rejected.message) from None

        if isinstance(parsed, Ignored):
            log.info("webhook acknowledged and ignored: %s", parsed.reason)
            resp.context["outcome"] = "ignored"
            resp.media = OK
            return

        extra = {"deploymentId": parsed.deployment_id}
        try:
            await asyncio.to_thread(self._check_owner, parsed)
            accepted = await asyncio.to_thread(self._inbox.accept, parsed)
        except DeploymentTaken as taken:
            message = foreign_repository_message(parsed.deployment_id, taken.owner, taken.name)
            log.warning("webhook refused: %s", message, extra=extra)
            raise falcon.HTTPConflict(description=message) from None
        except InboxError as exc:
            # Not acknowledged, so the code host shows the delivery as failed and it can be redelivered.
            log.error("could not record event: %s", exc, extra=extra)
            raise falcon.HTTPInternalServerError(description="Event could not be recorded") from exc
        if accepted.duplicate:
            log.info("delivery %s already received; not processed again", parsed.delivery_id, extra=extra)
            resp.context["outcome"] = "duplicate"
            resp.media = OK
            return
        if accepted.stale:
            # A replay, or a delivery overtaken by a newer one: acting on it would deploy an old commit or remove
            # a preview its pull request has since reopened.
            log.warning("delivery %s is older than the pull request's last event (updated_at %s); not processed",
                        parsed.delivery_id, parsed.pr_updated_at, extra=extra)
            resp.context["outcome"] = "stale"
            resp.media = OK
            return
        log.info("accepted %s (delivery %s)", parsed.action, parsed.delivery_id, extra=extra)
        if parsed.action == "closed":
            self._dispatcher.cancel(parsed.deployment_id, "the pull request was closed")
        self._dispatcher.notify()
        if self._sync:
            outcome = await self._dispatcher.wait_for(accepted.seq)
            if outcome.status == "failed":
                raise falcon.HTTPInternalServerError(description=outcome.error or "Processing failed")
        resp.media = OK


    def _check_owner(self, event: PullRequestEvent) -> None:
        """A deployment belongs to one repository: `acme/web-app` and `acme-web/app` share a slug, and one
        must never update or remove the other's preview."""
        record = self._store.read().deployments.get(event.deployment_id)
        if record is not None and not record.belongs_to(event):
            raise DeploymentTaken(record.repoOwner, record.repoName)


async def _read_body(req: Request) -> bytes:
    """The raw body, refusing more than MAX_BODY_BYTES whether or not Content-Length is sent."""
    if req.content_length is not None and req.content_length > MAX_BODY_BYTES:
        raise _too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in req.stream:
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large() -> falcon.HTTPError:
    return falcon.HTTPContentTooLarge(
        description=f"Request body larger than {MAX_BODY_BYTES // (1024 * 1024)} MB"
    )


def _check_content_type(req: Request) -> None:
    media = (req.content_type or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise WebhookRejected(415, "Content-Type must be application/json")
