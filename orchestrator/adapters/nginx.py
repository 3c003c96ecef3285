"""The per-pull-request nginx route: write, test, reload; a route that fails the test is rolled back."""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestrator.adapters.commands import CommandFailed, DeploymentLog, run
from orchestrator.adapters.host_env import HostEnv

LOCATION_TEMPLATE = """# Written by Preview Orchestrator for {deployment_id}; removed on cleanup.
location /{slug}/pr-{pr}/ {{
    proxy_pass http://{host}:{port}/;
    proxy_http_version 1.1;
    proxy_set_header Host $host;
    proxy_set_header X-Real-IP $remote_addr;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header X-Forwarded-Prefix /{slug}/pr-{pr};
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection $http_connection;
    proxy_read_timeout 300s;
    proxy_connect_timeout 75s;
}}
"""


class ProxyError(Exception):
    pass


class Proxy:
    def __init__(self, config_dir: Path, test_command: str, reload_command: str, env: HostEnv) -> None:
        self.config_dir = config_dir
        self._env = env
        self._test = shlex.split(test_command)
        self._reload = shlex.split(reload_command)

    def path(self, slug: str, pr: int) -> Path:
        return self.config_dir / f"{slug}-pr-{pr}.conf"

    def route(self, slug: str, pr: int, deployment_id: str, port: int, host: str = "127.0.0.1") -> str:
        return LOCATION_TEMPLATE.format(slug=slug, pr=pr, deployment_id=deployment_id, port=port, host=host)

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
