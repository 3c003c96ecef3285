"""A Python sample app for preview tests: stdlib only. /redis and /memcached talk to the extra services."""

import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

MESSAGE = (Path(__file__).parent / "message.txt").read_text().strip()


def ask(host: str, port: int, command: bytes) -> str:
    with socket.create_connection((host, port), timeout=3) as conn:
        conn.sendall(command)
        return conn.recv(1024).decode().strip()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        status, body = 200, f"python says: {MESSAGE}\n"
        try:
            if self.path == "/health":
                body = "ok"
            elif self.path == "/db":
                socket.create_connection((os.environ["DB_HOST"], int(os.environ["DB_PORT"])), timeout=3).close()
                body = "db reachable"
            elif self.path == "/redis":
                url = urlparse(os.environ["REDIS_URL"])
                body = "redis: " + ask(url.hostname, url.port, b"PING\r\n")
            elif self.path == "/memcached":
                body = "memcached: " + ask(os.environ["MEMCACHED_HOST"], int(os.environ["MEMCACHED_PORT"]),
                                           b"version\r\n")
            elif self.path == "/headers":
                body = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
            elif self.path.startswith("/tcp/"):
                host, port = self.path.removeprefix("/tcp/").split("/", 1)
                socket.create_connection((host, int(port)), timeout=3).close()
                body = "open"
            elif self.path.startswith("/env/"):
                body = os.environ.get(self.path.removeprefix("/env/"), "<unset>")
            elif self.path != "/":
                status, body = 404, "not found"
        except (OSError, KeyError, ValueError) as exc:
            status, body = 502, f"error: {exc}"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
