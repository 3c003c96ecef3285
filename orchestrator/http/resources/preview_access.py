"""PREVIEW_PROTECTION=token: what nginx asks the service about a reviewer's request (adapters/nginx/route.py writes the
locations that ask).

- GET /api/preview-access/{deploymentId} — nginx's `auth_request` for every request to a preview: 204 when the
  request carries the preview's cookie with a valid token, 401 otherwise (nginx then shows its short page).
- GET /api/preview-access/{deploymentId}/token — the first visit through the comment's link: nginx hands over
  the link's token in `X-Preview-Token` (never in a URL, so no access log holds it) and the request's URI in
  `X-Original-URI`; a valid token sets the cookie, scoped to that preview, and redirects to the same address
  without the token; an invalid or expired one gets a 401 page.

A token is HMAC-SHA256 of the preview's subject — its repository (host, owner, name) and deployment id — and
its expiry (orchestrator/common/preview_tokens.py), so the token of one preview opens no other: not another pull
request's, and not another repository's preview of the same id (`acme/web-app` and `acme-web/app` share a slug).
A preview without a record opens to no token. Neither endpoint logs a token.
"""

from __future__ import annotations

import asyncio
import time

import falcon
from falcon.asgi import Request, Response

from orchestrator.common.naming import is_valid_deployment_id, parse_deployment_id, preview_segment
from orchestrator.common.preview_tokens import ACCESS_COOKIE, TOKEN_PARAMETER, check_preview_token
from orchestrator.common.secret_files import random_key, read_or_create
from orchestrator.settings import Settings
from orchestrator.state.store import DeploymentStore

EXPIRED_PAGE = ("<!doctype html><title>Preview link expired</title><h1>This link has expired or is not for this "
                "preview</h1><p>Open the preview from the newest link in the pull request's comment; a new push "
                "renews it.</p>\n")


class PreviewAccess:
    """The token key (created on first need, 0600 in the state directory) and the checks both endpoints make."""

    def __init__(self, settings: Settings, store: DeploymentStore) -> None:
        self._settings = settings
        self._store = store
        self._key: bytes | None = None

    async def key(self) -> bytes:
        if self._key is None:
            self._key = await asyncio.to_thread(read_or_create, self._settings.preview_token_key_path, random_key)
        return self._key

    def deployment(self, deployment_id: str) -> str:
        if self._settings.preview_protection != "token":
            raise falcon.HTTPNotFound(description="Previews are not protected by tokens (PREVIEW_PROTECTION)")
        if not is_valid_deployment_id(deployment_id):
            raise falcon.HTTPBadRequest(description="Invalid deployment id")
        return deployment_id

    async def subject(self, deployment_id: str) -> str | None:
        """What the preview's tokens are signed for (its record's `subject`); None without a record."""
        record = (await asyncio.to_thread(self._store.read)).deployments.get(deployment_id)
        return None if record is None else record.subject

    def prefix(self, deployment_id: str) -> str:
        """The path the preview's cookie is scoped to: `/{slug}/pr-{N}/` (`/{slug}/base/`), or `/` under host
        routing (the cookie is then the preview host's alone)."""
        if self._settings.preview_routing == "host":
            return "/"
        slug, pr = parse_deployment_id(deployment_id)
        return f"/{slug}/{preview_segment(pr)}/"


class PreviewAccessResource:
    def __init__(self, access: PreviewAccess) -> None:
        self._access = access

    async def on_get(self, req: Request, resp: Response, deployment_id: str) -> None:
        deployment = self._access.deployment(deployment_id)
        key, now, subject = await self._access.key(), time.time(), await self._access.subject(deployment)
        if subject is None or not any(check_preview_token(key, subject, value, now)
                                      for value in req.get_cookie_values(ACCESS_COOKIE) or ()):
            raise falcon.HTTPUnauthorized(description="No valid access cookie for this preview")
        resp.status = falcon.HTTP_204
        resp.set_header("Cache-Control", "no-store")


class PreviewTokenResource:
    def __init__(self, access: PreviewAccess) -> None:
        self._access = access

    async def on_get(self, req: Request, resp: Response, deployment_id: str) -> None:
        deployment = self._access.deployment(deployment_id)
        token = req.get_header("X-Preview-Token") or ""
        key, now, subject = await self._access.key(), time.time(), await self._access.subject(deployment)
        resp.set_header("Cache-Control", "no-store")
        if subject is None or not check_preview_token(key, subject, token, now):
            resp.status = falcon.HTTP_401
            resp.content_type = falcon.MEDIA_HTML
            resp.text = EXPIRED_PAGE
            return
        prefix = self._access.prefix(deployment)
        expires = int(token.split(".", 1)[0])
        resp.set_cookie(ACCESS_COOKIE, token, max_age=max(int(expires - now), 1), path=prefix,
                        secure=req.get_header("X-Forwarded-Proto") == "https", http_only=True, same_site="Lax")
        resp.status = falcon.HTTP_302
        resp.location = clean_location(req.get_header("X-Original-URI") or "", prefix)


def clean_location(original: str, prefix: str) -> str:
    """The request's own path and query without the token parameter; the preview's root when the path is not
    the preview's (or not a plain path: never a redirect to another host)."""
    path, sep, query = original.partition("?")
    if not path.startswith(prefix) or path.startswith("//") or any(c in original for c in "\\\r\n\0"):
        return prefix
    kept = [part for part in query.split("&") if part and part.split("=", 1)[0] != TOKEN_PARAMETER]
    return path + ("?" + "&".join(kept) if sep and kept else "")
