"""A fake of a code host's REST API on 127.0.0.1: records calls, keeps comments, deployments with their statuses
and commit statuses, fails on demand. GitHub's shapes at the root; `FakeCodeHost(prefix="/api/v1")` is Gitea's
(the same comment endpoints, commit statuses, `/version` and `/user`), `prefix="/api/v4"` GitLab's (merge request
notes and commit statuses of `/projects/{url-encoded path}`, `/user`)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

import jwt


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int


@dataclass
class FakeCodeHost:
    calls: list[Call] = field(default_factory=list)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    deployments: dict[int, dict[str, Any]] = field(default_factory=dict)
    commit_statuses: list[dict[str, Any]] = field(default_factory=list)  # as posted, oldest first
    prefix: str = ""  # where the API lives under the server's root (Gitea: /api/v1)
    # A GitHub App (app_id and its public key set): JWTs are checked on the app's endpoints, and every other call
    # needs an installation token this fake issued and that has not expired.
    app_id: int | None = None
    app_public_key: bytes | None = None
    installations: dict[str, int] = field(default_factory=dict)  # owner/repo -> installation id
    token_lifetime: float = 3600.0
    issued: dict[str, float] = field(default_factory=dict)  # installation token -> when it expires (epoch)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    # Open pull requests as the listing `GET /repos/{owner}/{repo}/pulls?state=open` returns them (GitHub's and
    # Gitea's shape): (owner, repo) -> number -> pull request. Pages carry Link and ETag (a 304 to If-None-Match
    # is free, as on GitHub); every other answer spends one of `rate_remaining`.
    pulls: dict[tuple[str, str], dict[int, dict[str, Any]]] = field(default_factory=dict)
    # Who may write to a repository (GitHub's and Gitea's collaborator permission), by user name: "admin",
    # "write", "read"; anyone else is not a collaborator (404).
    permissions: dict[str, str] = field(default_factory=dict)
    # GitLab's members of a project (inherited ones too), by user id: their access level (30 Developer, 20 Reporter)
    members: dict[int, int] = field(default_factory=dict)
    # Repositories as `GET /repos/{owner}/{repo}` (GitHub's and Gitea's shape) and GitLab's `GET /projects/{path}`
    # give them: (owner, repo) -> {"clone_url": ...} (a base preview's clone URL)
    repositories: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    listing_down: bool = False  # every listing answers 503 (the host "unreachable" for the reconcile)
    # A host slow to write comments: while this event is clear, a comment's creation or edit waits for it (60 s at
    # most) before it is answered; None: answered at once.
    comment_writes: threading.Event | None = None
    rate_limit: int = 5000
    rate_remaining: int = 5000
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 1000
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def fail_next(self, count: int, status: int, headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.failures.extend([(status, headers or {})] * count)

    def open_pull(self, owner: str, repo: str, number: int, branch: str, sha: str, clone_url: str,
                  draft: bool = False, labels: tuple[str, ...] = ()) -> None:
        """A pull request opened (or reopened) on the host: listed from now on."""
        with self.lock:
            self.pulls.setdefault((owner, repo), {})[number] = {
                "number": number, "state": "open", "draft": draft, "title": f"PR {number}",
                "labels": [{"name": name} for name in labels], "updated_at": _now(),
                "head": {"ref": branch, "sha": sha, "repo": {"full_name": f"{owner}/{repo}", "clone_url": clone_url}},
                "base": {"ref": "main", "repo": {"full_name": f"{owner}/{repo}", "clone_url": clone_url}}}

    def push_pull(self, owner: str, repo: str, number: int, sha: str) -> None:
        with self.lock:
            pull = self.pulls[(owner, repo)][number]
            pull["head"]["sha"], pull["updated_at"] = sha, _now()

    def close_pull(self, owner: str, repo: str, number: int) -> None:
        """Closed: no longer listed; asked for alone, it says `closed`."""
        with self.lock:
            pull = self.pulls.get((owner, repo), {}).get(number)
            if pull is not None:
                pull["state"], pull["updated_at"] = "closed", _now()

    def listing_calls(self) -> list[Call]:
        with self.lock:
            return [call for call in self.calls if re.search(r"/pulls(\?|$)", call.path)]

    def statuses_of(self, owner: str, repo: str, sha: str) -> list[dict[str, Any]]:
        """The commit statuses posted for `sha`, oldest first."""
        with self.lock:
            return [dict(status) for status in self.commit_statuses
                    if (status["owner"], status["repo"], status["sha"]) == (owner, repo, sha)]

    def comments_on(self, owner: str, repo: str, pr: int) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.comments.values() if (c["owner"], c["repo"], c["pr"]) == (owner, repo, pr)]

    def deployments_of(self, owner: str, repo: str, environment: str) -> list[dict[str, Any]]:
        """Deployments of an environment, oldest first, each with `statuses` (states in order)."""
        with self.lock:
            return [dict(d, statuses=list(d["statuses"])) for d in self.deployments.values()
                    if (d["owner"], d["repo"], d["environment"]) == (owner, repo, environment)]

    def start(self) -> FakeCodeHost:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                gate = fake.comment_writes
                writes_comment = self.command in ("POST", "PATCH") and re.search(r"/(comments|notes)\b", self.path)
                if gate is not None and writes_comment:
                    gate.wait(timeout=60)
                status, payload, headers = fake._route(self.command, self.path, body, dict(self.headers.items()))
                with fake.lock:
                    fake.calls.append(Call(self.command, self.path, body, dict(self.headers.items()), status))
                data = json.dumps(payload).encode() if status != 304 else b""
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if status != 304:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_PATCH = do_GET = do_PUT = _handle  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def _route(self, method: str, path: str, body: dict[str, Any],
               request_headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            if self.failures:
                status, headers = self.failures.pop(0)
                return status, {"message": "injected failure"}, headers
            path, _, query = path.partition("?")
            listing = re.fullmatch(r"/repos/([^/]+)/([^/]+)/pulls", path.removeprefix(self.prefix))
            if method == "GET" and listing:
                return self._listing(listing[1], listing[2], parse_qs(query), request_headers or {})
            one = re.fullmatch(r"/repos/([^/]+)/([^/]+)/pulls/(\d+)", path.removeprefix(self.prefix))
            if method == "GET" and one:
                pull = next((pulls.get(int(one[3])) for (o, r), pulls in self.pulls.items()
                             if (o.lower(), r.lower()) == (one[1].lower(), one[2].lower())), None)
                return (200, pull, {}) if pull else (404, {"message": "Not Found"}, {})
            repository = re.fullmatch(r"/repos/([^/]+)/([^/]+)", path.removeprefix(self.prefix))
            if method == "GET" and repository and self.prefix != "/api/v4":
                found = self._repository(repository[1], repository[2])
                return (200, found, {}) if found else (404, {"message": "Not Found"}, {})
            permission = re.fullmatch(r"/repos/([^/]+)/([^/]+)/collaborators/([^/]+)/permission",
                                      path.removeprefix(self.prefix))
            if method == "GET" and permission:
                level = self.permissions.get(permission[3])
                return (200, {"permission": level}, {}) if level else (404, {"message": "Not Found"}, {})
            if self.prefix:
                if not path.startswith(f"{self.prefix}/"):
                    return 404, {"message": "Not Found"}, {}
                path = path.removeprefix(self.prefix)
                if self.prefix == "/api/v4":
                    return self._gitlab(method, path, body)
                if method == "GET" and path == "/version":
                    return 200, {"version": "1.24.0"}, {}
                if method == "GET" and path == "/user":
                    return 200, {"login": "preview-bot"}, {}
            commit = re.fullmatch(r"/repos/([^/]+)/([^/]+)/statuses/([0-9a-f]{40,64})", path)
            if method == "POST" and commit and self.prefix:
                if body.get("state") not in {"pending", "success", "error", "failure", "warning"}:
                    return 422, {"message": "Validation Failed"}, {}
                self.commit_statuses.append({"owner": commit[1], "repo": commit[2], "sha": commit[3], **body})
                self.next_id += 1
                return 201, {"id": self.next_id, "status": body["state"]}, {}
            if self.app_id is not None and not path.endswith("/info/refs"):
                refused = self._app(method, path, request_headers or {})
                if refused is not None:
                    return refused
            if method == "GET" and path == "/rate_limit":
                return 200, {"resources": {"core": {"limit": 5000, "remaining": 4999, "reset": 0}}}, {}
            created = re.fullmatch(r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments", path)
            if method == "GET" and created:
                listed = [{"id": key, "body": c["body"]} for key, c in sorted(self.comments.items())
                          if (c["owner"], c["repo"], c["pr"]) == (created[1], created[2], int(created[3]))]
                return 200, listed, {}
            if method == "POST" and created:
                self.next_id += 1
                self.comments[self.next_id] = {"owner": created[1], "repo": created[2], "pr": int(created[3]),
                                               "body": body.get("body", ""), "edits": 0}
                return 201, {"id": self.next_id, "body": body.get("body", "")}, {}
            edited = re.fullmatch(r"/repos/([^/]+)/([^/]+)/issues/comments/(\d+)", path)
            if method == "PATCH" and edited:
                comment = self.comments.get(int(edited[3]))
                if comment is None:
                    return 404, {"message": "Not Found"}, {}
                comment["body"] = body.get("body", "")
                comment["edits"] += 1
                return 200, {"id": int(edited[3]), "body": comment["body"]}, {}
            deployments = re.fullmatch(r"/repos/([^/]+)/([^/]+)/deployments", path)
            if method == "POST" and deployments:
                if not body.get("ref") or not body.get("environment"):
                    return 422, {"message": "Validation Failed"}, {}
                self.next_id += 1
                self.deployments[self.next_id] = {"owner": deployments[1], "repo": deployments[2],
                                                  "id": self.next_id, "ref": body["ref"],
                                                  "environment": body["environment"], "request": body,
                                                  "statuses": []}
                return 201, {"id": self.next_id, "ref": body["ref"], "environment": body["environment"]}, {}
            status = re.fullmatch(r"/repos/([^/]+)/([^/]+)/deployments/(\d+)/statuses", path)
            if method == "POST" and status:
                deployment = self.deployments.get(int(status[3]))
                if deployment is None:
                    return 404, {"message": "Not Found"}, {}
                if body.get("state") not in {"error", "failure", "inactive", "in_progress", "queued", "pending",
                                             "success"}:
                    return 422, {"message": "Validation Failed"}, {}
                deployment["statuses"].append(body)
                self.next_id += 1
                return 201, {"id": self.next_id, "state": body["state"]}, {}
            return 404, {"message": "Not Found"}, {}

    def _listing(self, owner: str, repo: str, query: dict[str, list[str]],
                 headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        """One page of the open pull requests (the lock is held), newest first as GitHub lists them."""
        if self.listing_down:
            return 503, {"message": "Service Unavailable"}, {}
        size = int((query.get("per_page") or query.get("limit") or ["30"])[0])
        page = int((query.get("page") or ["1"])[0])
        # Owner and name are case-insensitive in the API's paths, as on GitHub and Gitea.
        listed = next((pulls for (o, r), pulls in self.pulls.items() if (o.lower(), r.lower()) ==
                       (owner.lower(), repo.lower())), {})
        pulls = [pull for _, pull in sorted(listed.items(), reverse=True) if pull["state"] == "open"]
        items = json.loads(json.dumps(pulls[(page - 1) * size:page * size]))
        etag = '"' + hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:20] + '"'
        answer = {"ETag": etag, "x-ratelimit-limit": str(self.rate_limit)}
        if page * size < len(pulls):
            following = {**{key: values[0] for key, values in query.items()}, "page": str(page + 1)}
            answer["Link"] = f'<{self.url}{self.prefix}/repos/{owner}/{repo}/pulls?{urlencode(following)}>; rel="next"'
        if headers.get("If-None-Match") == etag:
            return 304, None, {**answer, "x-ratelimit-remaining": str(self.rate_remaining)}
        self.rate_remaining = max(0, self.rate_remaining - 1)
        return 200, items, {**answer, "x-ratelimit-remaining": str(self.rate_remaining)}

    def _repository(self, owner: str, repo: str) -> dict[str, Any] | None:
        return next((found for (o, r), found in self.repositories.items()
                     if (o.lower(), r.lower()) == (owner.lower(), repo.lower())), None)

    def _gitlab(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        """GitLab's API v4 (the lock is held): notes of a merge request and commit statuses of a project."""
        if method == "GET" and path == "/user":
            return 200, {"username": "preview-bot"}, {}
        project = re.fullmatch(r"/projects/([^/]+)", path)
        if method == "GET" and project:
            owner, _, repo = unquote(project[1]).rpartition("/")
            found = self._repository(owner, repo)
            return (200, {"id": 1, "path_with_namespace": f"{owner}/{repo}", "http_url_to_repo": found["clone_url"]},
                    {}) if found else (404, {"message": "404 Project Not Found"}, {})
        member = re.fullmatch(r"/projects/([^/]+)/members/all/(\d+)", path)
        if method == "GET" and member:
            level = self.members.get(int(member[2]))
            return (200, {"id": int(member[2]), "access_level": level}, {}) if level else \
                (404, {"message": "404 Not found"}, {})
        notes = re.fullmatch(r"/projects/([^/]+)/merge_requests/(\d+)/notes(?:/(\d+))?", path)
        if notes:
            owner, _, repo = unquote(notes[1]).rpartition("/")
            key = (owner, repo, int(notes[2]))
            if method == "GET" and notes[3] is None:
                listed = [{"id": note_id, "body": c["body"]} for note_id, c in sorted(self.comments.items(),
                                                                                   reverse=True)
                          if (c["owner"], c["repo"], c["pr"]) == key]
                return 200, listed, {}
            if method == "POST" and notes[3] is None:
                self.next_id += 1
                self.comments[self.next_id] = {"owner": owner, "repo": repo, "pr": key[2], "body": body.get("body", ""),
                                               "edits": 0}
                return 201, {"id": self.next_id, "body": body.get("body", "")}, {}
            if method == "PUT" and notes[3] is not None:
                note = self.comments.get(int(notes[3]))
                if note is None or (note["owner"], note["repo"], note["pr"]) != key:
                    return 404, {"message": "404 Not found"}, {}
                note["body"] = body.get("body", "")
                note["edits"] += 1
                return 200, {"id": int(notes[3]), "body": note["body"]}, {}
        status = re.fullmatch(r"/projects/([^/]+)/statuses/([0-9a-f]{40,64})", path)
        if method == "POST" and status:
            if body.get("state") not in {"pending", "running", "success", "failed", "canceled"}:
                return 400, {"message": "state does not have a valid value"}, {}
            owner, _, repo = unquote(status[1]).rpartition("/")
            self.commit_statuses.append({"owner": owner, "repo": repo, "sha": status[2], **body})
            self.next_id += 1
            return 201, {"id": self.next_id, "status": body["state"]}, {}
        return 404, {"message": "404 Not found"}, {}

    def _app(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]] | None:
        """A GitHub App's calls (the lock is held): an answer, or None when the call may go on."""
        bearer = (headers.get("Authorization") or "").removeprefix("Bearer ")
        app_call = re.fullmatch(r"/repos/([^/]+)/([^/]+)/installation", path) or path == "/app" or \
            re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
        if app_call:
            try:  # what GitHub checks of the app's token: RS256 by the app's key, its id, at most 10 minutes
                claims = jwt.decode(bearer, self.app_public_key, algorithms=["RS256"], issuer=str(self.app_id),
                                    options={"require": ["iat", "exp", "iss"]}, leeway=60)
            except jwt.PyJWTError as exc:
                return 401, {"message": f"A JSON web token could not be decoded: {exc}"}, {}
            if claims["exp"] - claims["iat"] > 660:
                return 401, {"message": "'Expiration time' claim ('exp') is too far in the future"}, {}
            installation = re.fullmatch(r"/repos/([^/]+)/([^/]+)/installation", path)
            if installation:
                found = self.installations.get(f"{installation[1]}/{installation[2]}")
                return (200, {"id": found}, {}) if found else (404, {"message": "Not Found"}, {})
            if path == "/app":
                return 200, {"name": "preview-app", "installations_count": len(set(self.installations.values()))}, {}
            tokens = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
            if method == "POST" and tokens and int(tokens[1]) in self.installations.values():
                self.next_id += 1
                token, expires = f"ghs_fake_{self.next_id}", time.time() + self.token_lifetime
                self.issued[token] = expires
                stamp = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                return 201, {"token": token, "expires_at": stamp}, {}
            return 404, {"message": "Not Found"}, {}
        if self.issued.get(bearer, 0) <= time.time():
            return 401, {"message": "Bad credentials"}, {}
        return None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # GitHub's: to the second
