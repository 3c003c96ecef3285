"""A real nginx instance of the test's own (config, prefix and port in a temporary directory)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from orchestrator.common.naming import preview_subject
from tests.support import web
from tests.support.live import free_port

CONFIG = """worker_processes 1;
daemon on;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    server {{
        listen {address}{port};
        location = /nginx-alive {{ return 200 "alive"; }}
        location / {{ return 404; }}
        include {routes}/*.conf;
    }}
    # Host routing: one server per preview (setup-nginx's site includes them the same way, and makes room for
    # their long names).
    include {routes}/servers/*.conf;
    server_names_hash_bucket_size 256;
}}
"""


class Nginx:
    def __init__(self, directory: Path, routes: Path, all_addresses: bool = False) -> None:
        """`all_addresses`: listen on *:port, as setup-nginx's site does — host routing's servers listen there, and
        nginx gives a server of a more specific address (127.0.0.1:port) the requests to that address."""
        self.dir = directory
        self.routes = routes
        self.port = free_port()
        self.address = "" if all_addresses else "127.0.0.1:"
        self.conf = directory / "nginx.conf"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, *args: str) -> str:
        return shlex.join(["nginx", "-c", str(self.conf), "-p", str(self.dir), *args])

    @property
    def test_command(self) -> str:
        return self.command("-t", "-q")

    @property
    def reload_command(self) -> str:
        return self.command("-s", "reload")

    def start(self) -> Nginx:
        (self.dir / "tmp").mkdir(parents=True, exist_ok=True)
        self.routes.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(CONFIG.format(dir=self.dir, port=self.port, routes=self.routes, address=self.address))
        subprocess.run(shlex.split(self.command()), check=True, timeout=30)
        for _ in range(100):
            try:
                if web.get(f"{self.url}/nginx-alive", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def workers(self) -> set[int]:
        """Worker processes of this nginx's master (from /proc)."""
        try:
            master = int((self.dir / "nginx.pid").read_text().strip())
        except (OSError, ValueError):
            return set()
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:
                found.add(int(stat.parent.name))
        return found

    def wait_settled(self, timeout: float = 15.0) -> None:
        """After a reload the old worker may still answer for a moment; wait until only one worker is left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.workers()) == 1:
                return
            time.sleep(0.05)
        raise AssertionError(f"nginx still has workers {self.workers()} after {timeout}s")

    def wait_loaded(self, path: Path, timeout: float = 15.0) -> None:
        """Until nginx runs the configuration that holds `path` as last written, without touching a route (a
        request could wake a sleeping preview): one worker, started after the file's last change. The master
        applies a reload after `nginx -s reload` returns, so a worker count alone can still be the old one's."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            workers = self.workers()
            try:
                if len(workers) == 1 and _age(next(iter(workers))) < time.time() - path.stat().st_mtime:
                    return
            except OSError:  # the worker exited meanwhile (a reload's old one): look again
                pass
            time.sleep(0.05)
        raise AssertionError(f"nginx did not load {path} within {timeout}s (workers {self.workers()})")

    def stop(self) -> None:
        subprocess.run(shlex.split(self.command("-s", "quit")), timeout=30, capture_output=True)


def _age(pid: int) -> float:
    """Seconds since process `pid` started (its start in clock ticks after boot, against the uptime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def subject_of(deployment_id: str, repository: str = "github/acme/api") -> str:
    """What a route's wake key and a preview's tokens are signed for: a repository's preview (common/naming.py)."""
    return preview_subject(repository, deployment_id)


@contextmanager
def nginx_where_workers_look(prefix: str = "po-routes-", all_addresses: bool = False) -> Iterator[Nginx]:
    """nginx with its routes where its workers (nobody) can look, as /etc/nginx/preview-locations is on a host
    (pytest's temporary directories are private to root); removed afterwards. `all_addresses`: Nginx's."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    directory.chmod(0o755)
    server = Nginx(directory / "nginx", directory / "routes", all_addresses=all_addresses).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
