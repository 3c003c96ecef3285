"""The per-pull-request nginx route: write, test, reload; a route that fails the test is rolled back."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import httpx

from orchestrator.adapters.commands import CommandFailed, DeploymentLog, run
from orchestrator.adapters.host_env import HostEnv
from orchestrator.common.flow_control import FlowControl

LOCATION_TEMPLATE = r"""# Written by Preview Orchestrator for {deployment_id}; removed on cleanup.
location /{slug}/pr-{pr}/ {{
    proxy_pass http://{host}:{port}/;
    proxy_http_version 1.1;
    proxy_set_header Host $host;
    proxy_set_header X-Real-IP $remote_addr;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header X-Forwarded-Prefix /{slug}/pr-{pr};
    # An app that knows nothing of the prefix still works: redirects to its own root (relative, to 127.0.0.1 or
    # to the public host) come back under the prefix, cookies are scoped to it; other hosts are left alone.
    proxy_redirect "~^(?:https?://(?:127\.0\.0\.1:{port}|{public_name}(?::\d+)?))?/(?!{slug}/pr-{pr}/)(.*)$"
                   $scheme://$http_host/{slug}/pr-{pr}/$1;
    proxy_cookie_path "~^/(?!{slug}/pr-{pr}/)(.*)$" /{slug}/pr-{pr}/$1;
    # Tells a response of this preview from nginx's own pages (the deploy waits for it before `running`).
    add_header X-Preview-Deployment {deployment_id} always;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection $http_connection;
    proxy_read_timeout 300s;
    proxy_connect_timeout 75s;
}}
"""


SERVED_HEADER = "X-Preview-Deployment"
SERVED_TIMEOUT = 15.0
SERVED_STREAK = 5


class ProxyError(Exception):
    pass


class Proxy:
    def __init__(self, config_dir: Path, test_command: str, reload_command: str, env: HostEnv,
                 public_host: str = "localhost", listen_port: int = 80) -> None:
        self.config_dir = config_dir
        self._env = env
        self._public_host = public_host  # host[:port] of PREVIEW_BASE_URL
        self._listen_port = listen_port
        self._test = shlex.split(test_command)
        self._reload = shlex.split(reload_command)

    def path(self, slug: str, pr: int) -> Path:
        return self.config_dir / f"{slug}-pr-{pr}.conf"

    def route(self, slug: str, pr: int, deployment_id: str, port: int, host: str = "127.0.0.1") -> str:
        return LOCATION_TEMPLATE.format(slug=slug, pr=pr, deployment_id=deployment_id, port=port, host=host,
                                        public_name=re.escape(self._public_host.rsplit(":", 1)[0]))

    def wait_served(self, slug: str, pr: int, deployment_id: str, log: DeploymentLog | None,
                    control: FlowControl, timeout: float = SERVED_TIMEOUT) -> None:
        """Until nginx (on 127.0.0.1, PROXY_LISTEN_PORT, with the public host name) answers the preview's path
        from this route — any status, told by SERVED_HEADER — and not from a worker that predates the reload.
        Nothing listening there at all: the check cannot be made, which the log says; the deploy goes on."""
        url = f"http://127.0.0.1:{self._listen_port}/{slug}/pr-{pr}/"
        started, last, streak = time.monotonic(), "no answer", 0
        # After a reload an old worker may still take a connection for a moment: served means SERVED_STREAK
        # answers from the route in a row, each on a new connection.
        while True:
            control.check()
            try:
                response = httpx.get(url, headers={"Host": self._public_host}, timeout=5.0, follow_redirects=False)
                if response.headers.get(SERVED_HEADER) == deployment_id:
                    streak += 1
                    if streak >= SERVED_STREAK:
                        if log:
                            log.note(f"nginx serves the route ({response.status_code}, "
                                     f"{time.monotonic() - started:.2f}s after the reload)")
                        return
                else:
                    streak, last = 0, f"{response.status_code} without the preview's {SERVED_HEADER}"
            except httpx.ConnectError:
                if log:
                    log.note(f"nothing listens on 127.0.0.1:{self._listen_port} (PROXY_LISTEN_PORT): the route "
                             "could not be checked")
                return
            except httpx.HTTPError as exc:
                streak, last = 0, type(exc).__name__
            if time.monotonic() - started >= timeout:
                raise ProxyError(f"Nginx route not served after {timeout:.0f}s: {url} answered {last}")
            control.wait(0.05)

    def install(self, slug: str, pr: int, deployment_id: str, port: int, log: DeploymentLog | None,
                served: bool = False, host: str = "127.0.0.1") -> None:
        """Write the route, test the whole config, reload; restore the previous file if the test fails.

        `served`: nginx is known to serve this file (the preview was running). An update keeps its ports, so
        the route is then unchanged and nginx is left alone: a reload would only drop its open connections.
        `host`: where the app answers (127.0.0.1, or a swarm node's address: Runtime `app_address`)."""
        path = self.path(slug, pr)
        previous = path.read_bytes() if path.exists() else None
        wanted = self.route(slug, pr, deployment_id, port, host)
        if served and previous == wanted.encode():
            if log:
                log.note("nginx route unchanged; not reloaded")
            return
        self.config_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".conf.tmp")
        tmp.write_text(wanted)
        tmp.replace(path)
        try:
            self._run(self._test, log)
            self._run(self._reload, log)
        except ProxyError:
            # Leave nginx's directory as it was, so the next reload does not pick up a route we reported failed.
            if previous is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(previous)
            raise

    def remove(self, slug: str, pr: int, log: DeploymentLog | None, reload_anyway: bool = False) -> None:
        """Delete the route and reload. `reload_anyway`: the file may be gone while nginx still serves it
        (a cleanup interrupted between the two), so reload even then."""
        path = self.path(slug, pr)
        if not path.exists() and not reload_anyway:
            return
        path.unlink(missing_ok=True)
        self._run(self._reload, log)

    def reload(self, log: DeploymentLog | None) -> None:
        self._run(self._reload, log)

    def _run(self, argv: list[str], log: DeploymentLog | None) -> None:
        try:
            run(argv, cwd=None, env=self._env.tools(), timeout=60, log=log)
        except CommandFailed as exc:
            raise ProxyError(f"{' '.join(argv)}: {exc.tail(5) or exc}") from exc
