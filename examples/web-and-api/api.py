"""The API: /hello names the preview it runs in. Any origin may read it: under host routing the web page is
served from another host name than the API's."""

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        path = self.path.partition("?")[0]
        if path == "/health":
            status, body = 200, "ok"
        elif path == "/hello":
            status, body = 200, f"hello from the API of {os.environ.get('PREVIEW_URL', 'no preview')}"
        else:
            status, body = 404, "not found"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", 8081), Handler).serve_forever()  # noqa: S104 - inside its container
