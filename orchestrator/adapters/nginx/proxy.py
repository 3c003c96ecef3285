"""Route files in PROXY_CONFIG_DIR: write, test, reload (a route that fails the test is rolled back), and the wait
until nginx serves a route (served.py). The text is route.py's; the flag that opens a route flags.py's; the
activity files of sleep activity.py's."""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from orchestrator.adapters.nginx.activity import ActivityFiles
from orchestrator.adapters.nginx.errors import ProxyError
from orchestrator.adapters.nginx.flags import RouteFlags
from orchestrator.adapters.nginx.route import RoutedPort, Routing, route_text
from orchestrator.adapters.nginx.served import SERVED_TIMEOUT, Probe, wait_served
from orchestrator.adapters.nginx.users import USERS_FILE, UsersFile
from orchestrator.adapters.nginx_site import SERVERS_DIR
from orchestrator.common.commands import CommandFailed, DeploymentLog, run
from orchestrator.common.flow_control import FlowControl
from orchestrator.common.host_env import HostEnv
from orchestrator.common.naming import preview_host_label, preview_name, preview_segment, route_host_label
from orchestrator.common.preview_tokens import TOKEN_PARAMETER, sign_preview_token, wake_key
from orchestrator.common.secret_files import random_key, read_or_create

if TYPE_CHECKING:
    from orchestrator.settings import Settings

_logger = logging.getLogger("orchestrator.adapters.nginx")
Routes = Sequence[tuple[str, int]]  # the services routed besides the app: (route name, port)


# The app a route proxies to (its first proxy_pass that is not the service's: the route's own location comes first).
_APP_UPSTREAM = re.compile(r"^\s*proxy_pass http://(\[[0-9a-fA-F:.]+\]|[0-9.]+):([0-9]{1,5})/?;", re.MULTILINE)


class Proxy(RouteFlags, ActivityFiles):
    """The routes of PROXY_CONFIG_DIR; their flags (flags.py) and activity files (activity.py) are its bases'."""

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
        self._users = UsersFile(config_dir, env, test_command)
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

    def host_name(self, slug: str, pr: int, route: str | None = None) -> str:
        """Host routing: the preview's host name, or that of one of its routed services."""
        label = route_host_label(route, slug, pr) if route else preview_host_label(slug, pr)
        return f"{label}.{self.routing.domain}"

    def path(self, slug: str, pr: int) -> Path:
        """The preview's file: a location beside the others (path routing), or a server in SERVERS_DIR."""
        if self.routing.mode == "host":
            return self.config_dir / SERVERS_DIR / f"{preview_name(slug, pr)}.conf"
        return self.config_dir / f"{preview_name(slug, pr)}.conf"

    def _other_path(self, slug: str, pr: int) -> Path:
        """The file the other routing mode would have written (left by a change of PREVIEW_ROUTING)."""
        if self.routing.mode == "host":
            return self.config_dir / f"{preview_name(slug, pr)}.conf"
        return self.config_dir / SERVERS_DIR / f"{preview_name(slug, pr)}.conf"

    @property
    def users_file(self) -> Path | None:
        if self.routing.protection != "basic":
            return None
        return self.routing.users_file or self.config_dir / USERS_FILE

    def route(self, slug: str, pr: int, deployment_id: str, port: int, app_host: str = "127.0.0.1",
              guarded: bool | None = None, *, subject: str, routes: Routes = ()) -> str:
        """The route's text (route.py); `guarded`: it checks its flag (default: when flags_usable); `subject`: the
        preview of its repository (a record's or event's `subject`), which its wake key is signed for; `routes`:
        the services routed besides the app, (name, port) each."""
        guarded = self.flags_usable() if guarded is None else guarded
        woken = self.routing.sleep or self.routing.hand_off
        return route_text(self.routing, slug, pr, deployment_id, port, app_host, host_name=self.host_name(slug, pr),
                          flag=self.flag_path(slug, pr) if guarded else None, activity=self.activity_path(slug, pr),
                          users_file=self.users_file, wake_key=self._wake_key(subject) if woken else None,
                          public_host=self._public_host, listen_port=self._listen_port,
                          routes=[RoutedPort(name, routed, self.host_name(slug, pr, name)) for name, routed in routes])

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

    def _probe(self, slug: str, pr: int, route: str | None = None) -> tuple[str, str, str | None]:
        """Where to ask nginx for the preview (or one of its routed services): URL, Host header, TLS server name."""
        if self.routing.mode == "path":
            under = f"{route}/" if route else ""
            return (f"http://127.0.0.1:{self._listen_port}/{slug}/{preview_segment(pr)}/{under}", self._public_host,
                    None)
        host = self.host_name(slug, pr, route)
        if self.routing.tls:
            return f"https://127.0.0.1:{self.routing.tls_port}/", host, host
        return f"http://127.0.0.1:{self._listen_port}/", host, None

    def wait_served(self, slug: str, pr: int, deployment_id: str, log: DeploymentLog | None,
                    control: FlowControl, timeout: float = SERVED_TIMEOUT, closed: bool = False) -> None:
        """Until nginx answers from this route (served.py); `closed`: its closed answer is what is waited for."""
        url, host, sni = self._probe(slug, pr)
        path, flag = self.path(slug, pr), self.flag_path(slug, pr)
        probe = Probe(url, host, sni, self.routing.protection, path in self._pending, flag,
                      lambda: bool(self._guarded.get(path)) and flag.exists())
        wait_served(probe, deployment_id, log, control, timeout, closed)
        self._pending.discard(path)

    def wait_routes_served(self, slug: str, pr: int, deployment_id: str, routes: Routes, log: DeploymentLog | None,
                           control: FlowControl, timeout: float = SERVED_TIMEOUT) -> None:
        """Each routed service's route answers too (after `wait_served`: the reload that loaded them has settled)."""
        flag = self.flag_path(slug, pr)
        guarded = bool(self._guarded.get(self.path(slug, pr)))
        for name, _port in routes:
            url, host, sni = self._probe(slug, pr, name)
            probe = Probe(url, host, sni, self.routing.protection, False, flag, lambda: guarded and flag.exists())
            wait_served(probe, deployment_id, log, control, timeout)

    def install(self, slug: str, pr: int, deployment_id: str, port: int, log: DeploymentLog | None,
                served: bool = False, host: str = "127.0.0.1", closed: bool = False, *, subject: str,
                routes: Routes = ()) -> None:
        """Write the route, test the whole config, reload; restore the previous file if the test fails.

        `served`: nginx is known to serve this file (the preview was running). An update keeps its ports, so
        the route is then unchanged and nginx is left alone: a reload would only drop its open connections.
        `host`: where the app answers (127.0.0.1, or a swarm node's address: Runtime `app_address`).
        `closed`: the route answers 404 until `open` (a new preview's, loaded while the app builds); else it is
        opened first and serves with the reload. `routes`: the services routed besides the app, (name, port)."""
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
        wanted = self.route(slug, pr, deployment_id, port, host, guarded, subject=subject, routes=routes)
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

    def renew(self, routes: list[tuple[str, int, str, str, Routes]]) -> list[str]:
        """Rewrite the open routes of `routes` (slug, pr, deployment id, subject, routed services) that the service
        of today would
        write otherwise — a route of an older version honours what today's does not (an app's `X-Accel-*`), or
        carries a wake key of another form — keeping where they proxy to; one test and one reload for all, and
        every file put back if the test fails. A closed route is left to its deploy. Returns the ids renewed."""
        changed: dict[Path, bytes] = {}
        renewed = []
        try:
            for slug, pr, deployment_id, subject, routed in routes:
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
                wanted = self.route(slug, pr, deployment_id, int(found[2]), found[1], guarded, subject=subject,
                                    routes=routed)
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
        """PREVIEW_PROTECTION_USERS as the htpasswd file nginx reads (users.py), when its content changes."""
        self._users.write(self.routing)

    def reload(self, log: DeploymentLog | None) -> None:
        self._run(self._reload, log)

    def _run(self, argv: list[str], log: DeploymentLog | None) -> None:
        try:
            run(argv, cwd=None, env=self._env.tools(), timeout=60, log=log)
        except CommandFailed as exc:
            raise ProxyError(f"{' '.join(argv)}: {exc.tail(5) or exc}") from exc


