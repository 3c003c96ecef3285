"""What nginx and the service exchange about a preview, signed with the service's keys: the reviewer's access
token (PREVIEW_PROTECTION=token) and the route's wake key (sleep). Every preview is named by its `subject` (its
repository and deployment id), so nothing signed for one repository's preview opens another repository's preview
of the same id. The messages signed are fixed: links already in comments and routes already written keep
working."""

from __future__ import annotations

import base64
import hmac
import re

from orchestrator.common.keyed import keyed

TOKEN_PARAMETER = "preview_token"  # noqa: S105 - the query parameter of the comment's link
# Sleep: the internal location of a route through which the service hands a woken request to the app
# (`X-Accel-Redirect: {WOKEN_PREFIX}{deploymentId}/{path under the preview}`; adapters/nginx/route.py writes it).
WOKEN_PREFIX = "/.preview-orchestrator/app/"
# A service routed besides the app: `{ROUTE_WOKEN_PREFIX}{deploymentId}/{route}/{path under its route}`.
ROUTE_WOKEN_PREFIX = "/.preview-orchestrator/route/"
ACCESS_COOKIE = "preview_access"  # the cookie the link's first visit sets, scoped to that preview
_TOKEN = re.compile(r"^([0-9]{1,12})\.[A-Za-z0-9_-]{43}$")


def sign_preview_token(key: bytes, subject: str, expires: int) -> str:
    """`{expiry, unix seconds}.{HMAC-SHA256(key, subject and expiry), base64url}`: opens one preview until it
    expires. `subject`: the preview of its repository (a record's or event's `subject`), so a link of one
    repository's pull request never opens another repository's preview of the same id."""
    mac = keyed(key, f"preview-access\n{subject}\n{expires}").digest()
    return f"{expires}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def check_preview_token(key: bytes, subject: str, token: str, now: float) -> bool:
    """Whether `token` was signed with `key` for this subject and has not expired (constant-time compare)."""
    match = _TOKEN.match(token)
    if match is None:
        return False
    expected = sign_preview_token(key, subject, int(match[1]))
    return hmac.compare_digest(expected.encode(), token.encode()) and int(match[1]) > now


def wake_key(key: bytes, subject: str) -> str:
    """The header value the route's wake location sends (`X-Preview-Wake-Key`): HMAC-SHA256 of the preview's
    subject (its repository and deployment id) with the service's wake key, so that a request that did not come
    from that preview's route (the service's port reached some other way, or the route of another repository's
    preview of the same id) cannot wake it or be handed to its app past the route's protection."""
    return keyed(key, f"preview-wake\n{subject}").hexdigest()
