"""The frontend: a page showing what the API says, asked twice. Its server asks at PREVIEW_INTERNAL_URL_API, on
the preview's own network; the reviewer's browser asks at PREVIEW_URL_API, through nginx and the preview's
protection (a preview's containers cannot reach nginx: previews never reach the host or each other)."""

import json
import os
import urllib.request
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Web and API</title></head>
<body><h1>Web and API</h1>
<p>The server asked the API: <span id="server">{server}</span></p>
<p>The browser asked the API: <span id="browser">(asking)</span></p>
<script>
fetch({api}).then(r => r.text()).then(
  text => {{ document.getElementById("browser").textContent = text; }},
  error => {{ document.getElementById("browser").textContent = "failed: " + error; }});
</script></body></html>
"""


def ask_api() -> str:
    with urllib.request.urlopen(os.environ["PREVIEW_INTERNAL_URL_API"] + "/hello", timeout=5) as answer:
        return answer.read().decode()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        path = self.path.partition("?")[0]
        kind = "text/plain"
        try:
            if path == "/health":
                status, body = 200, "ok"
            elif path == "/server":
                status, body = 200, ask_api()
            elif path == "/":
                kind = "text/html"
                status, body = 200, PAGE.format(server=escape(ask_api()),
                                                api=json.dumps(os.environ["PREVIEW_URL_API"] + "hello"))
            else:
                status, body = 404, "not found"
        except OSError as exc:
            status, body = 502, f"the API did not answer: {exc}"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8000"))), Handler).serve_forever()  # noqa: S104
