"""POST /webhook/{codehost} (and GitHub's at the spec's /webhook/codehost): the host's plugin verifies and
parses, then validate, record durably, answer; the dispatcher does the rest."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any

import falcon
from falcon.asgi import Request, Response

from orchestrator.events.delivery_log import DeliveryLog, Entry
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.gating import Gate
from orchestrator.events.inbox import Inbox, InboxError
from orchestrator.events.webhook import MAX_BODY_BYTES, parse_delivery
from orchestrator.observability.metrics import Metrics
from orchestrator.plugin_api.codehost import CodeHost
from orchestrator.plugin_api.deliveries import Delivery, Ignored, WebhookRejected
from orchestrator.settings import Settings
from orchestrator.state.http_bodies import StatusOk
from orchestrator.state.records import DeploymentTaken, PullRequestEvent, check_owner
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.events.webhook")
OK = StatusOk().model_dump()
KNOWN_EVENTS = frozenset({"pull_request", "pull_request_sync", "ping", "push", "issue_comment", "pull_request_review",
                          "Merge Request Hook", "Push Hook", "Note Hook"})
OUTCOMES = {400: "invalid", 401: "unauthorized", 403: "forbidden", 409: "conflict", 413: "too_large",
            415: "unsupported_media", 500: "error"}


class WebhookResource:
    def __init__(self, host: CodeHost, settings: Settings, inbox: Inbox, dispatcher: Dispatcher, metrics: Metrics,
                 store: DeploymentStore, deliveries: DeliveryLog) -> None:
        self._host = host
        self._metrics = metrics
        self._store = store
        self._allowed = settings.allowed_for(host.name)
        self._bases = settings.base_for(host.name)
        self._gate = Gate.of(settings)
        self._sync = settings.webhook_processing == "sync"
        self._allow_forks = settings.allow_fork_prs
        self._inbox = inbox
        self._dispatcher = dispatcher
        self._deliveries = deliveries

    async def on_post(self, req: Request, resp: Response) -> None:
        headers = {name.lower(): value for name, value in req.headers.items()}
        event_type = self._host.event_name(Delivery(headers, b""))  # the host's own reading (Forgejo's header too)
        # Only known event names become label values: the header is the sender's and labels must stay few.
        event_label = event_type if event_type in KNOWN_EVENTS else "other"
        # What the delivery log keeps of it, filled in as the delivery is understood.
        seen: dict[str, Any] = {"codehost": self._host.name, "event": event_type,
                                "delivery_id": self._host.delivery_id(Delivery(headers, b""))}
        try:
            await self._receive(req, resp, headers, seen)
        except falcon.HTTPError as error:
            self._metrics.webhooks.labels(event_label, OUTCOMES.get(error.status_code, "error")).inc()
            # A sync-mode flow that failed was accepted all the same (and can be replayed).
            outcome = "accepted" if seen.get("kept_event") is not None else "refused"
            await self._log(Entry(outcome=outcome, status=error.status_code, reason=error.description, **seen))
            raise
        outcome = resp.context.get("outcome", "accepted")
        self._metrics.webhooks.labels(event_label, outcome).inc()
        await self._log(Entry(outcome=outcome, status=200, **seen))

    async def _log(self, entry: Entry) -> None:
        try:
            await asyncio.to_thread(self._deliveries.record, entry)
        except sqlite3.Error as exc:  # the log is for people: never the reason a delivery fails
            log.warning("delivery not written to the delivery log: %s", exc)

    async def _receive(self, req: Request, resp: Response, headers: dict[str, str], seen: dict[str, Any]) -> None:
        delivery = Delivery(headers, await _read_body(req))
        try:
            foreign = self._host.claims(delivery)
            if foreign:
                raise WebhookRejected(400, f"Not a {self._host.name} delivery: {foreign}")
            self._host.verify(delivery)
            _check_content_type(req)
            parsed = parse_delivery(self._host, delivery, self._allowed, self._gate, self._bases)
        except WebhookRejected as rejected:
            log.warning("webhook rejected (%s): %s", rejected.status, rejected.message)
            seen.update(_about(rejected.about))
            status = falcon.code_to_http_status(rejected.status)
            raise falcon.HTTPError(status, description=rejected.message) from None

        if isinstance(parsed, Ignored):
            log.info("webhook acknowledged and ignored: %s", parsed.reason)
            seen.update(_about(parsed.about), reason=parsed.reason)
            resp.context["outcome"] = "ignored"
            resp.media = OK
            return

        extra = {"deploymentId": parsed.deployment_id}
        seen.update(repository=f"{parsed.repo_owner}/{parsed.repo_name}", pr_number=parsed.pr_number,
                    action=parsed.action)
        try:
            await asyncio.to_thread(check_record_owner, self._store, parsed)
            accepted = await asyncio.to_thread(self._inbox.accept, parsed)
        except DeploymentTaken as taken:
            log.warning("webhook refused: %s", taken.message, extra=extra)
            raise falcon.HTTPConflict(description=taken.message) from None
        except InboxError as exc:
            # Not acknowledged, so the code host shows the delivery as failed and it can be redelivered.
            log.error("could not record event: %s", exc, extra=extra)
            raise falcon.HTTPInternalServerError(description="Event could not be recorded") from exc
        if accepted.duplicate:
            log.info("delivery %s already received; not processed again", parsed.delivery_id, extra=extra)
            seen["reason"] = "a delivery with this id was received before"
            resp.context["outcome"] = "duplicate"
            resp.media = OK
            return
        if accepted.stale:
            # A replay, or a delivery overtaken by a newer one: acting on it would deploy an old commit or remove
            # a preview its pull request has since reopened.
            log.warning("delivery %s is older than the pull request's last event (updated_at %s); not processed",
                        parsed.delivery_id, parsed.pr_updated_at, extra=extra)
            seen["reason"] = "older than the pull request's last event (or the same again)"
            resp.context["outcome"] = "stale"
            resp.media = OK
            return
        log.info("accepted %s (delivery %s)", parsed.action, parsed.delivery_id, extra=extra)
        seen["kept_event"] = parsed
        if parsed.from_fork and not self._allow_forks and parsed.action != "closed":
            # Kept (an approved fork's push is held, the pull request is told how to approve), but deploys nothing.
            seen["reason"] = "from a fork: no preview until a writer comments /preview approve (ALLOW_FORK_PRS)"
        queue_accepted(self._dispatcher, parsed)
        if self._sync:
            outcome = await self._dispatcher.wait_for(accepted.seq)
            if outcome.status == "failed":
                raise falcon.HTTPInternalServerError(description=outcome.error or "Processing failed")
        resp.media = OK


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


def check_record_owner(store: DeploymentStore, event: PullRequestEvent) -> None:
    """check_owner against the preview's record in the store (DeploymentTaken)."""
    check_owner(store.read().deployments.get(event.deployment_id), event)


def queue_accepted(dispatcher: Dispatcher, event: PullRequestEvent) -> None:
    """An event just accepted into the inbox: a `closed` one stops the preview's running deploy; look for work."""
    if event.action == "closed":
        dispatcher.cancel(event.deployment_id, "the pull request was closed")
    dispatcher.notify()


def _about(about: tuple[str, int, str] | None) -> dict[str, Any]:
    return dict(zip(("repository", "pr_number", "action"), about, strict=True)) if about else {}


def _too_large() -> falcon.HTTPError:
    return falcon.HTTPContentTooLarge(
        description=f"Request body larger than {MAX_BODY_BYTES // (1024 * 1024)} MB"
    )


def _check_content_type(req: Request) -> None:
    media = (req.content_type or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise WebhookRejected(415, "Content-Type must be application/json")
