"""An ordinary app with a login, written as if it were alone on its host: it knows nothing of a path prefix.

`/` redirects to `/auth/login?next=%2F` until the session cookie is set (Path=/); the login form posts to
`login` (relative, as forms usually do); `POST /auth/login` sets the cookie and redirects to `next`; then `/`
says who is signed in. Stdlib only, like the python sample."""

import os
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

FORM = ('<!doctype html><title>Sign in</title><form method="post" action="login?next={next}">'
        '<input name="user"><button>Sign in</button></form>\n')


class Handler(BaseHTTPRequestHandler):
    def user(self) -> str | None:
        cookie = SimpleCookie(self.headers.get("Cookie", ""))
        return cookie["session"].value if "session" in cookie else None

    def answer(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        if url.path == "/health":
            self.answer(200, "ok")
        elif url.path == "/":
            user = self.user()
            if user:
                self.answer(200, f"signed in as {user}\n")
            else:
                self.answer(302, headers={"Location": "/auth/login?next=%2F"})
        elif url.path == "/auth/login":
            following = parse_qs(url.query).get("next", ["/"])[0]
            self.answer(200, FORM.format(next=following.replace("/", "%2F")), {"Content-Type": "text/html"})
        else:
            self.answer(404, "not found")

    def do_POST(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        if url.path != "/auth/login":
            self.answer(404, "not found")
            return
        length = int(self.headers.get("Content-Length") or 0)
        user = parse_qs(self.rfile.read(length).decode()).get("user", [""])[0]
        following = parse_qs(url.query).get("next", ["/"])[0]
        if not user.isalnum() or not following.startswith("/") or following.startswith("//"):
            self.answer(400, "bad login")
            return
        self.answer(302, headers={"Set-Cookie": f"session={user}; Path=/; HttpOnly", "Location": following})


ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
