"""Notes in MongoDB through pymongo (DATABASE_URL has the user, the database and authSource=admin)."""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pymongo import MongoClient

client = MongoClient(os.environ["DATABASE_URL"], serverSelectionTimeoutMS=5000)
notes = client.get_default_database()["notes"]
MESSAGE = (Path(__file__).parent / "message.txt").read_text().strip()


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: str, kind: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            self._send(200, "ok" if client.admin.command("ping")["ok"] else "no")
        elif self.path == "/":
            self._send(200, f"python-mongo says: {MESSAGE}\n")
        elif self.path == "/notes":
            self._send(200, json.dumps([note["text"] for note in notes.find({})]), "application/json")
        else:
            self._send(404, "not found")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        notes.insert_one({"text": json.loads(self.rfile.read(length))["text"]})
        self.do_GET()


ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
