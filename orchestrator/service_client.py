"""`preview-orchestrator list | logs ID [--follow] | cleanup ID`: talk to the running service over HTTP.

The service is found at --url, else PREVIEW_ORCHESTRATOR_URL, else http://127.0.0.1:$ORCHESTRATOR_PORT
(3000 by default). These commands need no secrets: they use the API the service already exposes.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import Any

import httpx

from orchestrator.humanize import age
from orchestrator.text_table import format_table

EXIT_UNREACHABLE = 2


class ServiceUnreachable(Exception):
    pass


def service_url(explicit: str | None) -> str:
    if explicit:
        return explicit.rstrip("/")
    if os.environ.get("PREVIEW_ORCHESTRATOR_URL"):
        return os.environ["PREVIEW_ORCHESTRATOR_URL"].rstrip("/")
    return f"http://127.0.0.1:{os.environ.get('ORCHESTRATOR_PORT', '3000')}"


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def previews_table(deployments: list[dict[str, Any]], now: datetime | None = None) -> str:
    rows = [["ID", "STATUS", "PR", "BRANCH", "COMMIT", "AGE", "URL"]]
    for d in sorted(deployments, key=lambda d: (d["projectSlug"], d["prNumber"])):
        status = d["status"] + (f" ({d['error']})" if d.get("error") else "")
        rows.append([d["deploymentId"], status if len(status) <= 60 else status[:57] + "...", f"#{d['prNumber']}",
                     d["branch"], (d["commitSha"] or "")[:7],
                     age(datetime.fromisoformat(d["createdAt"]), now or datetime.now(UTC)), d["url"]])
    return format_table(rows)


def _request(method: str, url: str, path: str, timeout: float) -> httpx.Response:
    try:
        return httpx.request(method, f"{url}{path}", timeout=timeout)
    except httpx.TransportError as exc:
        raise ServiceUnreachable(f"cannot reach the service at {url}: {exc}") from None


def list_previews(url: str, as_json: bool) -> int:
    response = _request("GET", url, "/api/previews", timeout=30)
    if response.status_code != 200:
        print(f"preview-orchestrator: {_error(response)}", file=sys.stderr)
        return 1
    deployments = response.json()["deployments"]
    if as_json:
        sys.stdout.write(response.text + "\n")
    elif deployments:
        sys.stdout.write(previews_table(deployments))
    else:
        print("No previews.")
    return 0


def show_logs(url: str, deployment_id: str, follow: bool) -> int:
    params = {"follow": "true"} if follow else {}
    try:
        # No read timeout while following: a build can be silent for minutes.
        with httpx.stream("GET", f"{url}/api/previews/{deployment_id}/logs", params=params,
                          timeout=httpx.Timeout(30, read=None if follow else 30)) as response:
            if response.status_code != 200:
                response.read()
                print(f"preview-orchestrator: {_error(response)}", file=sys.stderr)
                return 1
            for chunk in response.iter_bytes():
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
    except httpx.TransportError as exc:
        raise ServiceUnreachable(f"cannot reach the service at {url}: {exc}") from None
    return 0


def cleanup(url: str, deployment_id: str) -> int:
    response = _request("DELETE", url, f"/api/previews/{deployment_id}", timeout=600)  # waits for the cleanup
    if response.status_code != 200:
        print(f"preview-orchestrator: {_error(response)}", file=sys.stderr)
        return 1
    print(response.json()["message"])
    return 0
