"""GET /api/preview-wake/{deploymentId} — what a route's wake location asks when its app did not answer
(PREVIEW_IDLE_MINUTES; adapters/nginx/route.py writes the location, docs/routing.md tells the whole path).

nginx sends the route's key (`X-Preview-Wake-Key`, common/preview_tokens.py `wake_key`), the request's URI and
method, and its Accept header; by then the route's protection has let the request through. The answer:

- the preview is running and was asleep when the request came (woken now, or meanwhile by another request):
  `X-Accel-Redirect` to the route's
  internal location of the app, so nginx serves the same request from the app — for GET and HEAD; other methods
  get a 307 to the same address, which clients repeat with their body (nginx's internal redirect would turn
  them into a GET);
- sleeping: a `wake` event is queued (or the one already queued for this sleep is joined) and waited for, up to
  BROWSER_WAIT_SECONDS for a browser (Accept: text/html) — then a small "waking up" page that reloads itself —
  or up to CLIENT_WAIT_SECONDS for other clients — then 503 with Retry-After;
- running since before the request came: the app itself closed the connection or timed out, and the client
  gets that 502 (or 504) as it is — the request is never handed back, so a POST the app dropped reaches it once;
- being updated (a push arrived): the same page or 503; failed: 502 with the reason; gone: 404.

Without the route's key: 403, and nothing is woken — the service's port reached some other way must not wake
previews, nor reach an app past its route's protection.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from datetime import UTC, datetime, timedelta
from html import escape
from urllib.parse import unquote

import falcon
from falcon.asgi import Request, Response

from orchestrator.common.naming import is_valid_deployment_id, preview_segment
from orchestrator.common.preview_tokens import ROUTE_WOKEN_PREFIX, WOKEN_PREFIX, wake_key
from orchestrator.common.secret_files import random_key, read_or_create
from orchestrator.events.dispatcher import Dispatcher
from orchestrator.events.inbox import Inbox, InboxError
from orchestrator.events.sleep import request_wake
from orchestrator.settings import Settings
from orchestrator.state.records import DeploymentRecord, DeploymentTaken
from orchestrator.state.store import DeploymentStore

log = logging.getLogger("orchestrator.preview_wake")

BROWSER_WAIT_SECONDS = 1.5  # a browser gets the app's answer if it is awake by then, else the waking page
CLIENT_WAIT_SECONDS = 60.0  # other clients wait for the app (nginx waits 120 s for this answer)
REFRESH_SECONDS = 1
KEY_HEADER = "X-Preview-Wake-Key"
ROUTE_HEADER = "X-Preview-Route"  # the routed service (x-preview) whose route the request came by; empty: the app
REPLAYED = ("GET", "HEAD")  # methods nginx's internal redirect keeps
# A request came this long before the wake finished and still counts as one that found the preview asleep: the
# request's age (nginx's $request_time) has millisecond resolution and the two clocks are read apart.
AGE_SLACK = timedelta(seconds=0.05)

WAKING_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh}">
<title>Waking up the preview…</title>
<style>body{{font:16px system-ui,sans-serif;margin:4rem auto;max-width:32rem;color:#24292f}}</style></head>
<body><h1>⏳ {heading}</h1><p>{text}</p><p>This page reloads by itself.</p></body></html>
"""


class PreviewWakeResource:
    def __init__(self, settings: Settings, store: DeploymentStore, inbox: Inbox, dispatcher: Dispatcher) -> None:
        self._settings = settings
        self._store = store
        self._inbox = inbox
        self._dispatcher = dispatcher
        self._key: bytes | None = None

    async def on_get(self, req: Request, resp: Response, deployment_id: str) -> None:
        if not is_valid_deployment_id(deployment_id):
            raise falcon.HTTPBadRequest(description="Invalid deployment id")
        record = await self._record(deployment_id)
        # Signed for the record's repository and id: without a record, or from the route of another repository's
        # preview of the same id, nothing is woken (and a guess learns nothing: the same answer either way).
        expected = wake_key(await self._wake_key(), record.subject if record else f"none#{deployment_id}")
        if record is None or not hmac.compare_digest((req.get_header(KEY_HEADER) or "").encode(), expected.encode()):
            raise falcon.HTTPForbidden(description="Only a preview's route may wake it")
        resp.set_header("Cache-Control", "no-store")
        browser = "text/html" in (req.get_header("Accept") or "")
        came = _request_start(req.get_header("X-Request-Age"))
        if record is not None and record.status == "sleeping":
            record = await self._wake(record, BROWSER_WAIT_SECONDS if browser else CLIENT_WAIT_SECONDS)
        if record is None:
            raise falcon.HTTPNotFound(description="No such preview")
        if record.status == "running" and not _found_asleep(record, came):
            _app_failed(req, resp, record)
        elif record.status == "running":
            self._hand_back(req, resp, record)
        elif record.status in ("sleeping", "building"):
            self._waiting(resp, record, browser)
        else:
            resp.status = falcon.HTTP_502
            resp.content_type = falcon.MEDIA_TEXT
            resp.text = f"Preview {deployment_id} failed: {record.error or 'unknown error'}\n"

    async def _wake(self, record: DeploymentRecord, wait: float) -> DeploymentRecord | None:
        """Queue (or join) the wake of this sleep and wait for it, at most `wait` seconds; the record after."""
        try:
            accepted = await asyncio.to_thread(request_wake, self._inbox, record)
        except (InboxError, DeploymentTaken) as exc:  # taken: another repository's event waits for this id
            log.error("wake not queued: %s", exc, extra={"deploymentId": record.deploymentId})
            return record
        self._dispatcher.notify()
        try:
            await asyncio.wait_for(self._dispatcher.wait_for(accepted.seq), timeout=wait)
        except TimeoutError:
            pass  # the wake goes on; this request gets the waiting answer, the next one the app
        return await self._record(record.deploymentId)

    def _hand_back(self, req: Request, resp: Response, record: DeploymentRecord) -> None:
        """The request, to the app now awake: served by nginx from the route's internal location (GET, HEAD), or
        repeated by the client (307)."""
        original = req.get_header("X-Original-URI") or "/"
        if (req.get_header("X-Original-Method") or "GET").upper() not in REPLAYED:
            resp.status = falcon.HTTP_307
            resp.location = original if _plain(original) else "/"
            return
        resp.status = falcon.HTTP_200
        # Which of the preview's routes the request came by: nginx's wake location of that route says (it sets the
        # header itself, empty for the app's, so a client's own never reaches here); a name the record does not
        # route goes to the app.
        route = req.get_header(ROUTE_HEADER) or ""
        if route not in {known.name for known in record.routes}:
            route = ""
        path = self._under_preview(original, record, route)
        woken = (f"{ROUTE_WOKEN_PREFIX}{record.deploymentId}/{route}" if route
                 else f"{WOKEN_PREFIX}{record.deploymentId}")
        resp.set_header("X-Accel-Redirect", f"{woken}{path}")

    def _under_preview(self, original: str, record: DeploymentRecord, route: str = "") -> str:
        """The request's path and query as the app (or the routed service `route`) sees them: under path routing
        without the route's prefix."""
        if not _plain(original):
            return "/"
        if self._settings.preview_routing == "host":
            return original
        prefix = f"/{record.projectSlug}/{preview_segment(record.prNumber)}" + (f"/{route}" if route else "")
        return original.removeprefix(prefix) if original.startswith(prefix + "/") else "/"

    def _waiting(self, resp: Response, record: DeploymentRecord, browser: bool) -> None:
        updating = record.status == "building"
        resp.status = falcon.HTTP_503
        resp.set_header("Retry-After", str(5 if updating else REFRESH_SECONDS))
        if not browser:
            resp.content_type = falcon.MEDIA_TEXT
            resp.text = (f"Preview {record.deploymentId} is {'being updated' if updating else 'waking up'}; "
                         "retry in a moment\n")
            return
        resp.content_type = "text/html; charset=utf-8"
        resp.text = WAKING_PAGE.format(
            refresh=5 if updating else REFRESH_SECONDS,
            heading="The preview is being updated" if updating else "The preview is waking up",
            text=escape(f"A new commit of {_what(record)} is being deployed; it opens when it is "
                        "ready." if updating else "No one had opened it for a while, so it was asleep. It will be "
                        "back in a few seconds."))

    async def _record(self, deployment_id: str) -> DeploymentRecord | None:
        data = await asyncio.to_thread(self._store.read)
        return data.deployments.get(deployment_id)

    async def _wake_key(self) -> bytes:
        if self._key is None:
            self._key = await asyncio.to_thread(read_or_create, self._settings.preview_wake_key_path, random_key)
        return self._key


def _what(record: DeploymentRecord) -> str:
    return f"the default branch ({record.branch})" if record.is_base else f"pull request #{record.prNumber}"


def _plain(uri: str) -> bool:
    """A path of this host (never `//host`), ASCII as a request line is, without characters that end a header,
    and without a `.` or `..` segment, plain or percent-encoded: the path is appended to the route's internal
    location, and must never climb out of it into another one."""
    path = unquote(uri.partition("?")[0])
    segments = path.replace("\\", "/").split("/")
    return (uri.startswith("/") and not uri.startswith("//") and uri.isascii()
            and not any(c in uri for c in "\\\r\n\0") and "." not in segments and ".." not in segments)


def _request_start(age: str | None) -> datetime | None:
    """When the request reached nginx (`X-Request-Age`: nginx's $request_time, seconds); None when not told."""
    try:
        seconds = float(age or "")
    except ValueError:
        return None
    if not 0 <= seconds < 86_400:
        return None
    return datetime.now(UTC) - timedelta(seconds=seconds)


def _found_asleep(record: DeploymentRecord, came: datetime | None) -> bool:
    """Whether the request came before the preview's last wake finished (it found the app asleep, or being
    woken). A route written before the request's age was sent tells nothing: then only a wake may hand back."""
    return record.wokeAt is not None and (came is None or came <= record.wokeAt + AGE_SLACK)


def _app_failed(req: Request, resp: Response, record: DeploymentRecord) -> None:
    """The running app closed the connection or did not answer in time: nginx's own error, as it is."""
    # nginx's $upstream_status: the status of each upstream tried so far, the app's last ("502", "504")
    timed_out = (req.get_header("X-Upstream-Status") or "").replace(":", ",").split(",")[0].strip() == "504"
    resp.status = falcon.HTTP_504 if timed_out else falcon.HTTP_502
    resp.content_type = falcon.MEDIA_TEXT
    what = "did not answer in time" if timed_out else "closed the connection without an answer"
    resp.text = f"Preview {record.deploymentId}: the app {what}\n"
