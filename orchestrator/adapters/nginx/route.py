"""The text of a preview's nginx route, and nothing else: no file is read or written here (proxy.py does that).

Path routing: a `location /{slug}/pr-{N}/` included inside the site's server. Host routing: a `server` of its own
per preview. Either carries the preview's protection (basic, or auth_request asking the service about the cookie a
signed link set), its closed check (the flag), and with sleep or hand-off the wake location.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import SecretStr

from orchestrator.common.naming import preview_segment
from orchestrator.common.preview_tokens import ROUTE_WOKEN_PREFIX, TOKEN_PARAMETER, WOKEN_PREFIX

if TYPE_CHECKING:
    from orchestrator.settings import Settings

HEADER = "# Written by Preview Orchestrator for {deployment_id}; removed on cleanup.\n"

PATH_LOCATION = r"""location /{prefix}/ {{
{closed}{guard}    proxy_pass http://{app_host}:{port}/;
    proxy_set_header X-Forwarded-Prefix /{prefix};
    # An app that knows nothing of the prefix still works: redirects to its own root (relative, to 127.0.0.1 or
    # to the public host) come back under the prefix, cookies are scoped to it; other hosts are left alone, and so
    # is anything under the preview's own prefix (a routed service's redirect or cookie for the app's pages).
    proxy_redirect "~^(?:https?://(?:127\.0\.0\.1:{port}|{public_name}(?::\d+)?))?/(?!{preview}/)(.*)$"
                   $scheme://$http_host/{prefix}/$1;
    proxy_cookie_path "~^/(?!{preview}/)(.*)$" /{prefix}/$1;
{proxied}{sleep}}}
"""

HOST_LOCATION = """    location / {{
{closed}{guard}        proxy_pass http://{app_host}:{port};
{proxied}{sleep}    }}
"""

# Every location that proxies to an app: the app is the pull request's, and nginx honours `X-Accel-*` headers of
# any upstream — an app answering `X-Accel-Redirect: <another preview's internal location>` would have nginx serve
# that preview past its protection (docs/security.md, "Between previews"). Only the service's own wake answer may
# hand a request back, and the wake location is the only one that proxies to the service and honours it.
APP_HEADER_RULE = ("proxy_ignore_headers X-Accel-Redirect X-Accel-Expires X-Accel-Limit-Rate X-Accel-Buffering "
                   "X-Accel-Charset;")

PROXIED = f"""    {APP_HEADER_RULE}
    proxy_hide_header X-Accel-Redirect;
    # A cookie's Domain is the preview's own host: `Domain=<PREVIEW_DOMAIN>` would reach every other preview
    # (cookie tossing under host routing). A cookie set by the app's JavaScript is beyond nginx (docs/security.md).
    proxy_cookie_domain ~.+ $host;
    proxy_http_version 1.1;
    proxy_set_header Host $host;
    proxy_set_header X-Real-IP $remote_addr;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header X-Forwarded-Host $http_host;
    # Tells a response of this preview from nginx's own pages (the deploy waits for it before `running`).
    add_header X-Preview-Deployment {{deployment_id}} always;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection $http_connection;
    proxy_read_timeout 300s;
    proxy_connect_timeout 75s;
"""

# Before anything else (the protection, the app, the wake): a route whose flag is missing is not open yet.
CLOSED_LINES = """    if (!-f {flag}) {{
        add_header X-Preview-Closed {deployment_id} always;
        return 404;
    }}
"""

BASIC_GUARD = """    auth_basic "Preview {deployment_id}";
    auth_basic_user_file {users_file};
"""

# The comment's link carries ?preview_token=…: handed to the service in a header (so that no URL the service
# logs holds it), which sets the preview's cookie and redirects to the clean URL. Every other request needs that
# cookie, checked by auth_request; without it, a short 401 page.
TOKEN_GUARD = f"""    if ($arg_{TOKEN_PARAMETER}) {{{{
        set $preview_token $arg_{TOKEN_PARAMETER};
        rewrite ^ /.preview-orchestrator/token/{{deployment_id}}? last;
    }}}}
    auth_request /.preview-orchestrator/auth/{{deployment_id}};
    error_page 401 /.preview-orchestrator/denied/{{deployment_id}};
"""

TOKEN_LOCATIONS = """location = /.preview-orchestrator/auth/{deployment_id} {{
    internal;
    proxy_method GET;
    proxy_pass http://{service}/api/preview-access/{deployment_id};
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
}}
location = /.preview-orchestrator/token/{deployment_id} {{
    internal;
    proxy_method GET;
    proxy_pass http://{service}/api/preview-access/{deployment_id}/token;
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
    proxy_set_header Cookie "";
    proxy_set_header X-Preview-Token $preview_token;
    proxy_set_header X-Original-URI $request_uri;
    proxy_set_header X-Forwarded-Proto $scheme;
    add_header X-Preview-Deployment {deployment_id} always;
}}
location = /.preview-orchestrator/denied/{deployment_id} {{
    internal;
    default_type text/html;
    add_header X-Preview-Deployment {deployment_id} always;
    add_header Cache-Control no-store always;
    return 401 "{denied}";
}}
"""  # noqa: S105 - a template, not a password
DENIED_PAGE = ("<!doctype html><title>Preview protected</title><h1>This preview is protected</h1><p>Open it from "
               "the link in the pull request's comment. The link expires; a new push renews it.</p>")

# Sleep: the requests that reach the app (or wake it: an upstream was asked; never a request the protection turned
# away) are logged to the activity file, whose time is the preview's last request.
ACTIVITY_LINE = """    access_log {activity} combined if=$upstream_addr;
"""
# nginx's own 502/504 — nothing listens on the app's port: the preview sleeps, or an update stopped the old app
# before the new one started — goes to the wake location, inside the route (the protection has already let the
# request through): the service wakes a sleeping preview, and says "being updated" while a deploy runs.
HAND_OFF_LINE = """    error_page 502 504 = @preview-wake-{wake};
"""

# The wake location asks the service (GET, no body, no cookies or credentials of the reviewer, the route's key,
# how long ago the request came: the service hands back only a request that found the preview asleep; a running
# app that closed the connection or timed out gets its 502/504 as it is);
# the service wakes the app, then answers `X-Accel-Redirect: /.preview-orchestrator/app/{id}/{the request's path
# under the preview}`, which nginx serves from the app now awake (an internal location: no client reaches it
# directly), or answers itself (a "waking up" page, a 503 with Retry-After). A named location takes no URI in
# proxy_pass, hence the rewrite.
WAKE_LOCATIONS = """location @preview-wake-{wake} {{
    rewrite ^ /api/preview-wake/{deployment_id}? break;
    proxy_method GET;
    proxy_pass http://{service};
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
    proxy_set_header Cookie "";
    proxy_set_header Authorization "";
    proxy_set_header X-Preview-Wake-Key {key};
    proxy_set_header X-Preview-Route "{route}";
    proxy_set_header X-Original-URI $request_uri;
    proxy_set_header X-Original-Method $request_method;
    proxy_set_header X-Request-Age $request_time;
    proxy_set_header X-Upstream-Status $upstream_status;
    proxy_read_timeout 120s;
    add_header X-Preview-Deployment {deployment_id} always;
    add_header Cache-Control no-store always;
{activity_log}}}
location {woken}/ {{
    internal;
    proxy_pass http://{app_host}:{port}/;
{app_extra}{proxied}{activity_log}}}
"""
# The path route's own handling of the prefix, for the app's location of the wake (the same lines as PATH_LOCATION's).
WAKE_PATH_LINES = r"""    proxy_set_header X-Forwarded-Prefix /{prefix};
    proxy_redirect "~^(?:https?://(?:127\.0\.0\.1:{port}|{public_name}(?::\d+)?))?/(?!{preview}/)(.*)$"
                   $scheme://$http_host/{prefix}/$1;
    proxy_cookie_path "~^/(?!{preview}/)(.*)$" /{prefix}/$1;
"""
HOST_SERVER = """server {{
    listen {listen};
    server_name {host};
{tls}{body}}}
"""

HTTPS_REDIRECT = """    add_header X-Preview-Deployment {deployment_id} always;
    return 301 https://$host{port_suffix}$request_uri;
"""

TLS_LINES = """    ssl_certificate {cert};
    ssl_certificate_key {key};
"""


@dataclass(frozen=True)
class Routing:
    """How reviewers reach previews and who may open them (PREVIEW_ROUTING, PREVIEW_DOMAIN, PREVIEW_TLS_*,
    PREVIEW_PROTECTION*, PREVIEW_TOKEN_TTL_HOURS)."""

    mode: Literal["path", "host"] = "path"
    domain: str = "localhost"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_port: int = 443
    protection: Literal["none", "basic", "token"] = "none"
    users: SecretStr = field(default=SecretStr(""), repr=False)  # user:password,...: hashed into USERS_FILE
    users_file: Path | None = None  # an operator's htpasswd file, used as is
    service: str = "127.0.0.1:3000"  # where nginx asks the service about a preview's cookie (token)
    token_key: Path | None = None
    token_ttl_hours: float = 168.0
    sleep: bool = False  # PREVIEW_IDLE_MINUTES and a runtime that can wake: routes log activity and wake the app
    # The runtime's updates stop the old app before the new one answers (the swarm): nginx's 502/504 go to the
    # service (the wake location), which says "being updated" while a deploy runs. Always so with `sleep`.
    hand_off: bool = False
    wake_key: Path | None = None  # the key behind X-Preview-Wake-Key (common/preview_tokens.py wake_key)

    @classmethod
    def from_settings(cls, settings: Settings, sleep: bool = False, hand_off: bool = False) -> Routing:
        """`sleep`: previews may sleep (PREVIEW_IDLE_MINUTES set, and the runtime can wake them); `hand_off`: the
        runtime's updates leave a moment when the app does not answer."""
        host = settings.orchestrator_host if settings.orchestrator_host not in ("0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
        return cls(mode=settings.preview_routing, domain=settings.preview_domain or "localhost",
                   tls_cert=settings.preview_tls_cert, tls_key=settings.preview_tls_key,
                   tls_port=settings.preview_tls_port, protection=settings.preview_protection,
                   users=settings.preview_protection_users, users_file=settings.preview_protection_users_file,
                   service=f"[{host}]:{settings.orchestrator_port}" if ":" in host else
                   f"{host}:{settings.orchestrator_port}",
                   token_key=settings.preview_token_key_path, token_ttl_hours=settings.preview_token_ttl_hours,
                   sleep=sleep, hand_off=hand_off, wake_key=settings.preview_wake_key_path)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None and self.tls_key is not None


@dataclass(frozen=True)
class RoutedPort:
    """A service routed besides the app: its route's name, where it answers, and its host name (host routing)."""

    name: str
    port: int
    host_name: str


def route_text(routing: Routing, slug: str, pr: int, deployment_id: str, port: int, app_host: str, *,
               host_name: str, flag: Path | None, activity: Path, users_file: Path | None, wake_key: str | None,
               public_host: str, listen_port: int, routes: Sequence[RoutedPort] = ()) -> str:
    """The route's text: where the app answers (`app_host`, `port`), its name under host routing (`host_name`),
    the flag it checks (`flag`, None: none), its activity file, the users file of basic protection, the wake key
    of its wake location (needed with sleep or hand-off), PREVIEW_BASE_URL's host and nginx's port, and the
    services routed besides the app (`routes`: a location `/{slug}/pr-{N}/{name}/` each, or a server of their own
    host name), each with the same protection, flag, activity file and wake as the app's."""
    guard, token = "", ""
    if routing.protection == "basic":
        guard = BASIC_GUARD.format(deployment_id=deployment_id, users_file=users_file)
    elif routing.protection == "token":
        guard = TOKEN_GUARD.format(deployment_id=deployment_id)
        token = TOKEN_LOCATIONS.format(deployment_id=deployment_id, service=routing.service, denied=DENIED_PAGE)
    closed = CLOSED_LINES.format(flag=flag, deployment_id=deployment_id) if flag is not None else ""
    proxied = PROXIED.format(deployment_id=deployment_id)
    public_name = re.escape(public_host.rsplit(":", 1)[0])
    path_mode = routing.mode == "path"

    def one(route: RoutedPort | None) -> tuple[str, str]:
        """A route's location and its wake locations: the app's (None), or a routed service's."""
        target = port if route is None else route.port
        preview = f"{slug}/{preview_segment(pr)}"
        prefix = preview + ("" if route is None else f"/{route.name}")
        wake_name = deployment_id if route is None else f"{deployment_id}--{route.name}"
        sleep, wake = "", ""
        if routing.sleep or routing.hand_off:
            sleep = (ACTIVITY_LINE.format(activity=activity) if routing.sleep else "") + \
                HAND_OFF_LINE.format(wake=wake_name)
            wake = WAKE_LOCATIONS.format(
                wake=wake_name, deployment_id=deployment_id, service=routing.service, key=wake_key,
                route="" if route is None else route.name,
                activity_log=f"    access_log {activity} combined;\n" if routing.sleep else "",
                app_host=app_host, port=target, proxied=proxied,
                woken=WOKEN_PREFIX + deployment_id if route is None
                else f"{ROUTE_WOKEN_PREFIX}{deployment_id}/{route.name}",
                app_extra=WAKE_PATH_LINES.format(prefix=prefix, preview=preview, port=target, public_name=public_name)
                if path_mode else "")
        if path_mode:
            return PATH_LOCATION.format(prefix=prefix, preview=preview, port=target, app_host=app_host, guard=guard,
                                        closed=closed, proxied=proxied, sleep=sleep, public_name=public_name), wake
        return HOST_LOCATION.format(port=target, app_host=app_host, guard=_indent(guard), closed=_indent(closed),
                                    proxied=_indent(proxied), sleep=_indent(sleep)), wake

    location, wake = one(None)
    if path_mode:  # one server (the site's): the token's locations once
        return HEADER.format(deployment_id=deployment_id) + location + token + wake + "".join(
            "".join(one(route)) for route in routes)
    text = HEADER.format(deployment_id=deployment_id) + _servers(routing, host_name, listen_port, deployment_id,
                                                                 location + _indent(token + wake))
    for route in routes:
        location, wake = one(route)
        text += _servers(routing, route.host_name, listen_port, deployment_id, location + _indent(token + wake))
    return text


def _servers(routing: Routing, host: str, listen_port: int, deployment_id: str, body: str) -> str:
    """A host's server: plain, or with TLS a plain one that redirects and the TLS one."""
    if not routing.tls:
        return HOST_SERVER.format(listen=listen_port, host=host, tls="", body=body)
    suffix = "" if routing.tls_port == 443 else f":{routing.tls_port}"
    plain = HOST_SERVER.format(listen=listen_port, host=host, tls="",
                               body=HTTPS_REDIRECT.format(deployment_id=deployment_id, port_suffix=suffix))
    return plain + HOST_SERVER.format(listen=f"{routing.tls_port} ssl", host=host, body=body,
                                      tls=TLS_LINES.format(cert=routing.tls_cert, key=routing.tls_key))


def _indent(text: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in text.splitlines(keepends=True))
