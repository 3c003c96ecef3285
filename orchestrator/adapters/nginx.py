"""The per-pull-request nginx route: write, test, reload; a route that fails the test is rolled back.

Path routing (PREVIEW_ROUTING=path): a `location /{slug}/pr-{N}/` file in PROXY_CONFIG_DIR, included inside the
site's server. Host routing (`host`): a `server` of its own per preview, `{slug}-pr-{N}.{PREVIEW_DOMAIN}`, in
PROXY_CONFIG_DIR/servers/, included at http level (a server cannot stand inside another). Either carries the
preview's protection (PREVIEW_PROTECTION): HTTP basic authentication, or nginx's auth_request asking the service
about the cookie a signed link of the pull-request comment set (http/resources/preview_access.py).

With sleep (PREVIEW_IDLE_MINUTES), a route also logs the requests that reach its app to an activity file
(PROXY_CONFIG_DIR/activity/: its time is the preview's last request), and hands a request the sleeping app cannot
answer to the service's wake endpoint (http/resources/preview_wake.py), which wakes the app and gives the request
back to it.

A route opens with its flag file (PROXY_CONFIG_DIR/open/{slug}-pr-{N}): without it, the route answers 404 as if it
did not exist. A new preview's route is written and loaded while the app builds, closed, and opened once the app is
healthy — by creating the flag, which nginx looks at on every request: no reload on the way to `running`.
"""

from __future__ import annotations

import base64
import grp
import logging
import os
import pwd
import re
import secrets
import shlex
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from orchestrator.adapters.commands import CommandFailed, DeploymentLog, run
from orchestrator.adapters.host_env import HostEnv
from orchestrator.adapters.nginx_site import SERVERS_DIR, dump_command
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.naming import preview_host_label
from orchestrator.common.preview_tokens import TOKEN_PARAMETER, WOKEN_PREFIX, sign_preview_token, wake_key
from orchestrator.common.secret_files import random_key, read_or_create
from orchestrator.settings import protection_users

if TYPE_CHECKING:
    from orchestrator.settings import Settings

_logger = logging.getLogger("orchestrator.adapters.nginx")

HEADER = "# Written by Preview Orchestrator for {deployment_id}; removed on cleanup.\n"

PATH_LOCATION = r"""location /{slug}/pr-{pr}/ {{
{closed}{guard}    proxy_pass http://{app_host}:{port}/;
    proxy_set_header X-Forwarded-Prefix /{slug}/pr-{pr};
    # An app that knows nothing of the prefix still works: redirects to its own root (relative, to 127.0.0.1 or
    # to the public host) come back under the prefix, cookies are scoped to it; other hosts are left alone.
    proxy_redirect "~^(?:https?://(?:127\.0\.0\.1:{port}|{public_name}(?::\d+)?))?/(?!{slug}/pr-{pr}/)(.*)$"
                   $scheme://$http_host/{slug}/pr-{pr}/$1;
    proxy_cookie_path "~^/(?!{slug}/pr-{pr}/)(.*)$" /{slug}/pr-{pr}/$1;
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
HAND_OFF_LINE = """    error_page 502 504 = @preview-wake-{deployment_id};
"""

# The wake location asks the service (GET, no body, no cookies or credentials of the reviewer, the route's key,
# how long ago the request came: the service hands back only a request that found the preview asleep; a running
# app that closed the connection or timed out gets its 502/504 as it is);
# the service wakes the app, then answers `X-Accel-Redirect: /.preview-orchestrator/app/{id}/{the request's path
# under the preview}`, which nginx serves from the app now awake (an internal location: no client reaches it
# directly), or answers itself (a "waking up" page, a 503 with Retry-After). A named location takes no URI in
# proxy_pass, hence the rewrite.
WAKE_LOCATIONS = """location @preview-wake-{deployment_id} {{
    rewrite ^ /api/preview-wake/{deployment_id}? break;
    proxy_method GET;
    proxy_pass http://{service};
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
    proxy_set_header Cookie "";
    proxy_set_header Authorization "";
    proxy_set_header X-Preview-Wake-Key {key};
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
WAKE_PATH_LINES = r"""    proxy_set_header X-Forwarded-Prefix /{slug}/pr-{pr};
    proxy_redirect "~^(?:https?://(?:127\.0\.0\.1:{port}|{public_name}(?::\d+)?))?/(?!{slug}/pr-{pr}/)(.*)$"
                   $scheme://$http_host/{slug}/pr-{pr}/$1;
    proxy_cookie_path "~^/(?!{slug}/pr-{pr}/)(.*)$" /{slug}/pr-{pr}/$1;
"""
ACTIVITY_DIR = "activity"  # PROXY_CONFIG_DIR/activity/{slug}-pr-{N}.log: no `include` matches it
OPEN_DIR = "open"  # PROXY_CONFIG_DIR/open/{slug}-pr-{N}: the route's flag; no `include` matches it

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

SERVED_HEADER = "X-Preview-Deployment"
CLOSED_HEADER = "X-Preview-Closed"  # CLOSED_LINES' answer
SERVED_TIMEOUT = 15.0
SERVED_STREAK = 2  # answers from the route in a row, each on a new connection
# nginx lets its old workers take connections for 0.1 s after it started the new ones (measured): after a reload,
# answers from the route must go on this long after the first one.
SERVED_SETTLE = 0.2
# The app a route proxies to (its first proxy_pass that is not the service's: the route's own location comes first).
_APP_UPSTREAM = re.compile(r"^\s*proxy_pass http://(\[[0-9a-fA-F:.]+\]|[0-9.]+):([0-9]{1,5})/?;", re.MULTILINE)
UNSEEN_MARK = ".workers-cannot-look"  # in OPEN_DIR: nginx's workers were found not to see the flags
REFUSED_GRACE = 3.0
USERS_FILE = ".preview-users.htpasswd"  # PREVIEW_PROTECTION_USERS, hashed; a dot file no `include` matches
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._/-]*")
# `user name [group];` of nginx's main context (statements split on `;`, `{`, `}`): who its workers are.
_USER_DIRECTIVE = re.compile(r"(?:^|[;{}])\s*user\s+([^\s;]+)(?:\s+([^\s;]+))?\s*;")


class ProxyError(Exception):
    pass


class FlagUnseen(ProxyError):
    """The route answers closed although its flag exists: nginx's workers cannot look at the flag."""


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


class Proxy:
    def __init__(self, config_dir: Path, test_command: str, reload_command: str, env: HostEnv,
                 public_host: str = "localhost", listen_port: int = 80, routing: Routing | None = None) -> None:
        self.config_dir = config_dir
        self._env = env
        self._public_host = public_host  # host[:port] of PREVIEW_BASE_URL
        self._listen_port = listen_port
        self._test_command = test_command
        self._test = shlex.split(test_command)
        self._reload = shlex.split(reload_command)
        self.routing = routing or Routing()
        self._users_text: str | None = None  # USERS_FILE's content, hashed once per process
        self._flags: bool | None = None  # whether routes carry their flag's check (flags_usable)
        self._pending: set[Path] = set()  # routes reloaded by this process and not yet seen served since
        self._guarded: dict[Path, bool] = {}  # whether a route's file, as written, checks its flag

    @classmethod
    def for_settings(cls, settings: Settings, env: HostEnv, sleep: bool = False, hand_off: bool = False) -> Proxy:
        """The service's proxy. With PREVIEW_PROTECTION_USERS, the users file is rewritten at once, so that a
        restart with other credentials applies them to the previews already running. `sleep`, `hand_off`: Routing's."""
        proxy = cls(settings.proxy_config_dir, settings.proxy_test_command, settings.proxy_reload_command, env,
                    urlsplit(settings.preview_base_url or "http://localhost").netloc, settings.proxy_listen_port,
                    Routing.from_settings(settings, sleep, hand_off))
        try:
            proxy.write_users_file()
        except (ProxyError, OSError) as exc:  # said again by the first deploy, which fails on it
            _logger.warning("users file not written: %s", exc)
        return proxy

    def host_name(self, slug: str, pr: int) -> str:
        return f"{preview_host_label(slug, pr)}.{self.routing.domain}"

    def path(self, slug: str, pr: int) -> Path:
        """The preview's file: a location beside the others (path routing), or a server in SERVERS_DIR."""
        if self.routing.mode == "host":
            return self.config_dir / SERVERS_DIR / f"{slug}-pr-{pr}.conf"
        return self.config_dir / f"{slug}-pr-{pr}.conf"

    def _other_path(self, slug: str, pr: int) -> Path:
        """The file the other routing mode would have written (left by a change of PREVIEW_ROUTING)."""
        if self.routing.mode == "host":
            return self.config_dir / f"{slug}-pr-{pr}.conf"
        return self.config_dir / SERVERS_DIR / f"{slug}-pr-{pr}.conf"

    @property
    def users_file(self) -> Path | None:
        if self.routing.protection != "basic":
            return None
        return self.routing.users_file or self.config_dir / USERS_FILE

    def route(self, slug: str, pr: int, deployment_id: str, port: int, app_host: str = "127.0.0.1",
              guarded: bool | None = None, *, subject: str) -> str:
        """The route's text; `guarded`: it checks its flag (default: when flags_usable); `subject`: the preview
        of its repository (a record's or event's `subject`), which its wake key is signed for."""
        routing = self.routing
        guard, extra = "", ""
        if routing.protection == "basic":
            guard = BASIC_GUARD.format(deployment_id=deployment_id, users_file=self.users_file)
        elif routing.protection == "token":
            guard = TOKEN_GUARD.format(deployment_id=deployment_id)
            extra = TOKEN_LOCATIONS.format(deployment_id=deployment_id, service=routing.service, denied=DENIED_PAGE)
        guarded = self.flags_usable() if guarded is None else guarded
        closed = CLOSED_LINES.format(flag=self.flag_path(slug, pr), deployment_id=deployment_id) if guarded else ""
        proxied = PROXIED.format(deployment_id=deployment_id)
        public_name = re.escape(self._public_host.rsplit(":", 1)[0])
        sleep = ""
        if routing.sleep or routing.hand_off:
            activity = self.activity_path(slug, pr)
            sleep = (ACTIVITY_LINE.format(activity=activity) if routing.sleep else "") + \
                HAND_OFF_LINE.format(deployment_id=deployment_id)
            path_mode = routing.mode == "path"
            extra += WAKE_LOCATIONS.format(
                deployment_id=deployment_id, service=routing.service, key=self._wake_key(subject),
                activity_log=f"    access_log {activity} combined;\n" if routing.sleep else "",
                app_host=app_host, port=port, proxied=proxied,
                woken=WOKEN_PREFIX + deployment_id,
                app_extra=WAKE_PATH_LINES.format(slug=slug, pr=pr, port=port, public_name=public_name)
                if path_mode else "")
        if routing.mode == "path":
            location = PATH_LOCATION.format(slug=slug, pr=pr, port=port, app_host=app_host, guard=guard, closed=closed,
                                            proxied=proxied, sleep=sleep, public_name=public_name)
            return HEADER.format(deployment_id=deployment_id) + location + extra
        body = (HOST_LOCATION.format(port=port, app_host=app_host, guard=_indent(guard), closed=_indent(closed),
                                     proxied=_indent(proxied),
                                     sleep=_indent(sleep))
                + _indent(extra))
        host = self.host_name(slug, pr)
        if not routing.tls:
            return HEADER.format(deployment_id=deployment_id) + HOST_SERVER.format(
                listen=self._listen_port, host=host, tls="", body=body)
        suffix = "" if routing.tls_port == 443 else f":{routing.tls_port}"
        plain = HOST_SERVER.format(listen=self._listen_port, host=host, tls="",
                                   body=HTTPS_REDIRECT.format(deployment_id=deployment_id, port_suffix=suffix))
        secure = HOST_SERVER.format(listen=f"{routing.tls_port} ssl", host=host, body=body,
                                    tls=TLS_LINES.format(cert=routing.tls_cert, key=routing.tls_key))
        return HEADER.format(deployment_id=deployment_id) + plain + secure

    def reviewer_link(self, url: str, subject: str, now: float | None = None) -> str:
        """The link of the ready comment: the preview's URL, with PREVIEW_PROTECTION=token a signed token that
        opens this preview of this repository only (`subject`), until PREVIEW_TOKEN_TTL_HOURS from now. The record
        keeps the clean URL."""
        if self.routing.protection != "token" or self.routing.token_key is None:
            return url
        key = read_or_create(self.routing.token_key, random_key)
        expires = int((time.time() if now is None else now) + self.routing.token_ttl_hours * 3600)
        return f"{url}?{TOKEN_PARAMETER}={sign_preview_token(key, subject, expires)}"

    def _wake_key(self, subject: str) -> str:
        if self.routing.wake_key is None:
            raise ProxyError("no wake key file configured (Routing.wake_key)")
        return wake_key(read_or_create(self.routing.wake_key, random_key), subject)

    def activity_path(self, slug: str, pr: int) -> Path:
        """The preview's activity file: nginx logs each request that reaches the app to it (with sleep)."""
        return self.config_dir / ACTIVITY_DIR / f"{slug}-pr-{pr}.log"

    def last_activity(self, slug: str, pr: int) -> float | None:
        """When a request last reached the preview's app through nginx (the activity file's time, Unix seconds);
        None when the route keeps no activity file (written before sleep was switched on).

        The file is emptied on the way, keeping its time: its lines are not needed (they may hold the comment's
        token) and it must not grow. nginx appends through the descriptor it opened, so a line written meanwhile
        lands in the emptied file; its time is then the newer one."""
        path = self.activity_path(slug, pr)
        try:
            seen = path.stat()
            if seen.st_size:
                os.truncate(path, 0)  # moves the file's time: put back, unless a request came in meanwhile
                os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
                if path.stat().st_size:
                    os.utime(path)
                    return time.time()
        except FileNotFoundError:
            return None
        return seen.st_mtime

    def flag_path(self, slug: str, pr: int) -> Path:
        """The route's flag: while it exists the route is open (nginx looks at it on every request)."""
        return self.config_dir.resolve() / OPEN_DIR / f"{slug}-pr-{pr}"  # the path nginx's workers go through

    def flags_usable(self) -> bool:
        """Whether routes can open by their flag: nginx's workers (an unprivileged user) must be able to look at
        it, so every directory down to OPEN_DIR lets others through (as /etc/nginx does). Decided once per
        process (and its path must be plain: it stands in every route); else routes carry no check and are
        written when they open, with a reload."""
        if self._flags is None:
            directory = self.config_dir / OPEN_DIR
            try:
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(0o755)
                real = directory.resolve()  # a link's target's directories are what the workers go through
                self._flags = (_PLAIN_PATH.fullmatch(str(real)) is not None  # written unquoted into every route
                               and not (directory / UNSEEN_MARK).exists()
                               and all(part.stat().st_mode & stat.S_IXOTH for part in (real, *real.parents)))
            except OSError:
                self._flags = False
            if not self._flags:
                _logger.info("routes carry no flag: nginx's workers cannot look into %s (every directory above it "
                             "must let others through, and its path be plain); each is written when it opens, with "
                             "a reload", directory)
        return self._flags

    def stop_using_flags(self) -> None:
        """nginx's workers turned out not to see the flags (FlagUnseen): routes carry no check from now on, after a
        restart too (UNSEEN_MARK; remove it once nginx's workers can look into PROXY_CONFIG_DIR)."""
        self._flags = False
        try:
            (self.config_dir / OPEN_DIR / UNSEEN_MARK).touch()
        except OSError as exc:
            _logger.warning("%s not written: %s", UNSEEN_MARK, exc)

    def open(self, slug: str, pr: int) -> None:
        """Open the preview's route at once, without a reload (nginx's workers look at the flag); a route that
        checks no flag ignores it."""
        flag = self.flag_path(slug, pr)
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch(mode=0o644)

    def mark_activity(self, slug: str, pr: int) -> None:
        """Count now as the preview's last request (it was just woken)."""
        path = self.activity_path(slug, pr)
        if path.exists():
            os.utime(path)

    def _create_activity(self, slug: str, pr: int) -> None:
        """The activity file, the service's own (0600; nginx's master, root, opens it for its workers), made
        before nginx would make it so that the service may empty it; an existing one keeps its time."""
        path = self.activity_path(slug, pr)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))

    def _probe(self, slug: str, pr: int) -> tuple[str, str, str | None]:
        """Where to ask nginx for the preview: URL, Host header, TLS server name."""
        if self.routing.mode == "path":
            return f"http://127.0.0.1:{self._listen_port}/{slug}/pr-{pr}/", self._public_host, None
        host = self.host_name(slug, pr)
        if self.routing.tls:
            return f"https://127.0.0.1:{self.routing.tls_port}/", host, host
        return f"http://127.0.0.1:{self._listen_port}/", host, None

    def wait_served(self, slug: str, pr: int, deployment_id: str, log: DeploymentLog | None,
                    control: FlowControl, timeout: float = SERVED_TIMEOUT, closed: bool = False) -> None:
        """Until nginx (on 127.0.0.1, PROXY_LISTEN_PORT — or PREVIEW_TLS_PORT —, with the preview's path or
        host name) answers from this route — told by SERVED_HEADER — and not from a worker that predates the
        reload. Any status of the app will do; behind protection, nginx's own 401 (the probe has no
        credentials), which also shows that the protection works (a users file nginx's workers cannot read
        gives 500; a service nginx cannot reach, too). Nothing listening there at all: the check cannot be made,
        which the log says; the deploy goes on. `closed`: the route was loaded closed, and its closed answer
        (CLOSED_HEADER) is what is waited for."""
        url, host, sni = self._probe(slug, pr)
        protected = self.routing.protection != "none"
        headers = {"Host": host}
        if self.routing.protection == "basic":
            # Without credentials nginx answers 401 without opening the users file; with made-up ones it reads
            # the file (a 500 when its workers cannot) and still answers 401.
            probe = base64.b64encode(f"preview-orchestrator-probe:{secrets.token_hex(16)}".encode()).decode()
            headers["Authorization"] = f"Basic {probe}"
        started, last, streak, refused, unseen = time.monotonic(), "no answer", 0, None, 0
        # After a reload an old worker may still take a connection for a moment: served means SERVED_STREAK
        # answers from the route in a row, each on a new connection, and — after a reload this process has not
        # seen served yet — the last one SERVED_SETTLE after the first answer from the route. Until then, pauses
        # of 0.01 s growing to 0.5 s: nginx's new workers answer 0.03-0.1 s after the reload command returns; a
        # probe costs ~2 ms.
        pause = 0.01
        path = self.path(slug, pr)
        first_seen: float | None = None
        # One client, no connection kept: each probe opens a new one (a client per probe cost ~10 ms each).
        with httpx.Client(verify=False, timeout=5.0, follow_redirects=False, trust_env=False,  # noqa: S501 - only whether nginx answers
                          limits=httpx.Limits(max_keepalive_connections=0)) as client:
            while True:
                control.check()
                try:
                    response = client.get(url, headers=headers, extensions={"sni_hostname": sni} if sni else None)
                    refused = None
                    answered_closed = response.headers.get(CLOSED_HEADER) == deployment_id
                    from_route = answered_closed if closed else response.headers.get(SERVED_HEADER) == deployment_id
                    if (answered_closed and not closed and self._guarded.get(path)
                            and self.flag_path(slug, pr).exists()):
                        unseen += 1  # loaded and opened, yet closed: nginx's workers cannot look at the flag
                        if unseen >= SERVED_STREAK:
                            raise FlagUnseen(f"nginx's workers cannot look at {self.flag_path(slug, pr)} (see "
                                             "nginx's error log)")
                    else:
                        unseen = 0
                    if from_route and (closed or not protected or response.status_code == 401):
                        streak += 1
                        first_seen = first_seen or time.monotonic()
                        settled = path not in self._pending or time.monotonic() >= first_seen + SERVED_SETTLE
                        if streak >= SERVED_STREAK and settled:
                            self._pending.discard(path)
                            if log:
                                log.note(f"nginx serves the route ({response.status_code}, after "
                                         f"{time.monotonic() - started:.2f}s)")
                            return
                    elif from_route:
                        streak, last = 0, (f"{response.status_code} where the protection should answer 401 (a users "
                                           "file nginx's workers cannot read, or a service nginx cannot reach: see "
                                           "nginx's error log)")
                    else:
                        streak, last = 0, f"{response.status_code} without the preview's {SERVED_HEADER}"
                except httpx.ConnectError as exc:
                    if "SSL" in str(exc) or "ssl" in type(exc.__context__).__module__:
                        streak, last = 0, f"TLS handshake failed ({exc})"
                    else:
                        # A port the reload adds (PREVIEW_TLS_PORT's first server) is bound a moment after the reload
                        # command returns: refused for REFUSED_GRACE seconds in a row means nothing listens there.
                        refused = refused or time.monotonic()
                        streak, last = 0, "connection refused"
                        if time.monotonic() - refused >= min(REFUSED_GRACE, timeout):
                            if log:
                                log.note(f"nothing listens on {url} (PROXY_LISTEN_PORT, PREVIEW_TLS_PORT): the route "
                                         "could not be checked")
                            return
                except httpx.HTTPError as exc:
                    streak, last = 0, type(exc).__name__
                if time.monotonic() - started >= timeout:
                    raise ProxyError(f"Nginx route not served after {timeout:.0f}s: {url} (Host {host}) "
                                     f"answered {last}")
                if streak:  # confirming: the next answers at once
                    control.wait(0.01)
                else:
                    control.wait(pause)
                    pause = min(pause * 1.25, 0.5)

    def install(self, slug: str, pr: int, deployment_id: str, port: int, log: DeploymentLog | None,
                served: bool = False, host: str = "127.0.0.1", closed: bool = False, *, subject: str) -> None:
        """Write the route, test the whole config, reload; restore the previous file if the test fails.

        `served`: nginx is known to serve this file (the preview was running). An update keeps its ports, so
        the route is then unchanged and nginx is left alone: a reload would only drop its open connections.
        `host`: where the app answers (127.0.0.1, or a swarm node's address: Runtime `app_address`).
        `closed`: the route answers 404 until `open` (a new preview's, loaded while the app builds); else it is
        opened first and serves with the reload."""
        guarded = closed or self.flags_usable()  # decided once: another deploy may stop the flags meanwhile
        if closed and not self.flags_usable():
            raise ProxyError("a route cannot be loaded closed: nginx's workers cannot reach its flag")
        if closed:
            self.flag_path(slug, pr).unlink(missing_ok=True)
        else:
            self.open(slug, pr)
        path, other = self.path(slug, pr), self._other_path(slug, pr)
        previous = path.read_bytes() if path.exists() else None
        left = other.read_bytes() if other.exists() else None  # the route of the other routing mode
        wanted = self.route(slug, pr, deployment_id, port, host, guarded, subject=subject)
        self.write_users_file()
        if self.routing.sleep:
            self._create_activity(slug, pr)
        if served and previous == wanted.encode() and left is None:
            self._guarded[path] = guarded
            if log:
                log.note("nginx route unchanged; not reloaded")
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".conf.tmp")
        tmp.write_text(wanted)
        tmp.replace(path)
        other.unlink(missing_ok=True)
        try:
            self._run(self._test, log)
            self._run(self._reload, log)
            self._pending.add(path)
            self._guarded[path] = guarded
        except ProxyError:
            # Leave nginx's directory as it was, so the next reload does not pick up a route we reported failed.
            if previous is None:
                path.unlink(missing_ok=True)
                self.flag_path(slug, pr).unlink(missing_ok=True)  # no route, no flag: a later route starts closed
            else:
                path.write_bytes(previous)
            if left is not None:
                other.write_bytes(left)
            raise

    def renew(self, routes: list[tuple[str, int, str, str]]) -> list[str]:
        """Rewrite the open routes of `routes` (slug, pr, deployment id, subject) that the service of today would
        write otherwise — a route of an older version honours what today's does not (an app's `X-Accel-*`), or
        carries a wake key of another form — keeping where they proxy to; one test and one reload for all, and
        every file put back if the test fails. A closed route is left to its deploy. Returns the ids renewed."""
        changed: dict[Path, bytes] = {}
        renewed = []
        try:
            for slug, pr, deployment_id, subject in routes:
                path = self.path(slug, pr)
                try:
                    text = path.read_text()
                except OSError:
                    continue
                # the app's address: the first upstream that is not the service (a route's own location comes
                # before the wake's and the token's, but an app named by host name is not matched at all)
                found = next((m for m in _APP_UPSTREAM.finditer(text) if f"{m[1]}:{m[2]}" != self.routing.service),
                             None)
                guarded = "if (!-f " in text
                if found is None or (guarded and not self.flag_path(slug, pr).exists()):
                    continue
                wanted = self.route(slug, pr, deployment_id, int(found[2]), found[1], guarded, subject=subject)
                if wanted != text:
                    changed[path] = text.encode()
                    tmp = path.with_suffix(".conf.tmp")
                    tmp.write_text(wanted)
                    tmp.replace(path)
                    renewed.append(deployment_id)
            if changed:
                self._run(self._test, None)
                self._run(self._reload, None)
        except (ProxyError, OSError):
            for path, previous in changed.items():
                path.write_bytes(previous)
            raise
        if not changed:
            return []
        self._pending.update(changed)
        return renewed

    def remove(self, slug: str, pr: int, log: DeploymentLog | None, reload_anyway: bool = False) -> None:
        """Delete the route (of either routing mode) and reload. `reload_anyway`: the file may be gone while
        nginx still serves it (a cleanup interrupted between the two), so reload even then."""
        self.flag_path(slug, pr).unlink(missing_ok=True)  # closed at once, before the reload
        self._pending.discard(self.path(slug, pr))
        self._guarded.pop(self.path(slug, pr), None)
        paths = [p for p in (self.path(slug, pr), self._other_path(slug, pr)) if p.exists()]
        if paths or reload_anyway:
            for path in paths:
                path.unlink(missing_ok=True)
            self._run(self._reload, log)
        # After the reload: nginx no longer writes to it (an older worker's lines go to the removed file).
        self.activity_path(slug, pr).unlink(missing_ok=True)

    def write_users_file(self) -> None:
        """PREVIEW_PROTECTION_USERS as an htpasswd file nginx reads: SHA-512 crypt (`$6$`, `openssl passwd -6`,
        the password on stdin, never in argv), beside the routes (nginx's workers open it on every request; the
        state directory is private to the service), mode 0640, owned by root and the group of nginx's workers.
        Written when its content changes; the hashes are made once per process."""
        users = self.routing.users.get_secret_value().strip()
        if self.routing.protection != "basic" or self.routing.users_file is not None or not users:
            return
        if self._users_text is None:
            self._users_text = "".join(f"{user}:{_sha512_crypt(password, self._env)}\n"
                                       for user, password in protection_users(users))
        path = self.config_dir / USERS_FILE
        gid = self._worker_gid()
        try:
            status = path.lstat()
            if path.read_text() == self._users_text and (gid is None or status.st_gid == gid):
                return
        except OSError:
            pass
        self.config_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{USERS_FILE}.tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            if gid is not None:
                os.fchown(handle.fileno(), os.geteuid(), gid)
                os.fchmod(handle.fileno(), 0o640)
            handle.write(self._users_text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)

    def _worker_gid(self) -> int | None:
        """The group of nginx's workers: `user` of `nginx -T` (its group, else the group named like the user),
        else nginx's built-in default (nobody, group nogroup). None when the service is not root (then nginx,
        reloaded by the service, runs as the service's user too) or the group cannot be told."""
        if os.geteuid() != 0:
            return None
        user, group = "nobody", None
        dump = dump_command(self._test_command)
        if dump is not None:
            try:
                text = run(dump, cwd=None, env=self._env.tools(), timeout=60, log=None)
            except CommandFailed:
                text = ""
            found = _USER_DIRECTIVE.search("\n".join(line.split("#", 1)[0] for line in text.splitlines()))
            if found:
                user, group = found[1], found[2] or found[1]
        for name in ([group] if group else ["nogroup", "nobody"]):
            try:
                return grp.getgrnam(name).gr_gid
            except KeyError:
                continue
        try:
            return pwd.getpwnam(user).pw_gid
        except KeyError:
            return None

    def reload(self, log: DeploymentLog | None) -> None:
        self._run(self._reload, log)

    def _run(self, argv: list[str], log: DeploymentLog | None) -> None:
        try:
            run(argv, cwd=None, env=self._env.tools(), timeout=60, log=log)
        except CommandFailed as exc:
            raise ProxyError(f"{' '.join(argv)}: {exc.tail(5) or exc}") from exc


def _indent(text: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in text.splitlines(keepends=True))


def _sha512_crypt(password: str, env: HostEnv) -> str:
    """`openssl passwd -6`: SHA-512 crypt with a random salt, which nginx checks through the C library's crypt()
    (every Debian host has both). The password goes on stdin; only the hash comes back."""
    try:
        result = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password + "\n", capture_output=True,
                                text=True, timeout=30, env=env.tools(), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProxyError(f"openssl passwd -6 could not run: {type(exc).__name__}") from None
    hashed = result.stdout.strip()
    if result.returncode != 0 or not hashed.startswith("$6$") or "\n" in hashed:
        raise ProxyError(f"openssl passwd -6 failed: {result.stderr.strip()[-200:]}")
    return hashed
