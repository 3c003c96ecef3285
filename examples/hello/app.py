"""A first preview: a web page that says whether its database answers. Python's standard library only."""

import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            status, body = 200, "ok\n"
        elif self.path == "/":
            try:
                socket.create_connection((os.environ["DB_HOST"], int(os.environ["DB_PORT"])), timeout=2).close()
                database = "reachable"
            except OSError:
                database = "not reachable"
            status, body = 200, f"Hello from a preview! Database: {database}.\n"
        else:
            status, body = 404, "not found\n"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Hello).serve_forever()
