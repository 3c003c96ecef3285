"""`preview-orchestrator list | logs ID [--follow] | cleanup ID | up DIR | down ID | deliveries | replay N`: talk to
the running service over HTTP.

The service is found at --url, else PREVIEW_ORCHESTRATOR_URL, else http://127.0.0.1:$ORCHESTRATOR_PORT
(3000 by default). These commands need no secrets: they use the API the service already exposes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.common.humanize import age
from orchestrator.common.text_table import format_table, printable

EXIT_UNREACHABLE = 2


class ServiceUnreachable(Exception):
    pass


class ClientSettings(BaseSettings):
    """Where the service listens, read as the service reads its own settings: the environment, then `.env` in the
    working directory (an ORCHESTRATOR_PORT the service took from `.env` is the one these commands ask)."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore",
                                      case_sensitive=False)

    preview_orchestrator_url: str = ""
    orchestrator_port: int = Field(default=3000, ge=1, le=65535)


def service_url(explicit: str | None) -> str:
    if explicit:
        return explicit.rstrip("/")
    try:
        found = ClientSettings()
    except ValidationError:  # the service refuses it too, and says so at its start
        found = ClientSettings(_env_file=None, orchestrator_port=3000, preview_orchestrator_url="")
    if found.preview_orchestrator_url:
        return found.preview_orchestrator_url.rstrip("/")
    return f"http://127.0.0.1:{found.orchestrator_port}"


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def previews_table(deployments: list[dict[str, Any]], now: datetime | None = None) -> str:
    rows = [["ID", "STATUS", "HOST", "PR", "BRANCH", "COMMIT", "AGE", "URL"]]
    for d in sorted(deployments, key=lambda d: (d["projectSlug"], d["prNumber"])):
        status = d["status"] + (f" ({d['error']})" if d.get("error") else "")
        host = "local" if d.get("source") == "local" else d.get("codehost", "github")
        rows.append([d["deploymentId"], status if len(status) <= 60 else status[:57] + "...", host,
                     f"#{d['prNumber']}" if d["prNumber"] else "base",
                     d["branch"], (d["commitSha"] or "")[:7],
                     age(datetime.fromisoformat(d["createdAt"]), now or datetime.now(UTC)), d["url"]])
    return format_table(rows)


def deliveries_table(entries: list[dict[str, Any]]) -> str:
    rows = [["N", "RECEIVED", "HOST", "REPOSITORY", "PR", "EVENT", "OUTCOME", "WHY"]]
    for d in entries:
        event = " · ".join(part for part in (d.get("event"), d.get("action")) if part)
        outcome = d["outcome"] + (f" ({d['status']})" if d["status"] not in (200, 202) else "")
        reason = printable(d.get("reason") or "")
        rows.append([str(d["id"]), d["receivedAt"][:19].replace("T", " "), printable(d["codehost"]),
                     printable(d.get("repository") or ""), f"#{d['prNumber']}" if d.get("prNumber") else "",
                     printable(event), outcome, reason if len(reason) <= 70 else reason[:67] + "..."])
    return format_table(rows)


def list_deliveries(url: str, repository: str | None, pr: int | None, limit: int, as_json: bool) -> int:
    params = {key: str(value) for key, value in (("repository", repository), ("pr", pr), ("limit", limit))
              if value is not None}
    return _list(url, "/api/deliveries", "deliveries", deliveries_table, "No deliveries.", as_json, params)


def replay(url: str, entry: int) -> int:
    response = _request("POST", url, f"/api/deliveries/{entry}/replay", timeout=30, body={})
    if response.status_code != 202:
        print(f"preview-orchestrator: {_error(response)}", file=sys.stderr)
        return 1
    answer = response.json()
    print(f"Delivery {entry} replayed: {answer['action']} of {answer['deploymentId']} queued "
          f"(log entry {answer['logId']})")
    return 0


def _request(method: str, url: str, path: str, timeout: float, body: dict[str, Any] | None = None,
             params: dict[str, str] | None = None) -> httpx.Response:
    try:
        return httpx.request(method, f"{url}{path}", timeout=timeout, json=body, params=params)
    except httpx.TransportError as exc:
        raise ServiceUnreachable(f"cannot reach the service at {url}: {exc}") from None


def list_previews(url: str, as_json: bool) -> int:
    return _list(url, "/api/previews", "deployments", previews_table, "No previews.", as_json)


def _list(url: str, path: str, key: str, table: Callable[[list[dict[str, Any]]], str], empty: str, as_json: bool,
          params: dict[str, str] | None = None) -> int:
    """A listing of the service: its JSON as it came, or `table` of its `key` entries, or `empty`."""
    response = _request("GET", url, path, timeout=30, params=params or {})
    if response.status_code != 200:
        print(f"preview-orchestrator: {_error(response)}", file=sys.stderr)
        return 1
    entries = response.json()[key]
    if as_json:
        sys.stdout.write(response.text + "\n")
    elif entries:
        sys.stdout.write(table(entries))
    else:
        print(empty)
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


def up(url: str, directory: Path, name: str | None, pr: int, follow: bool) -> int:
    """Snapshot `directory`, ask the service to deploy it, wait for the outcome (streaming the log with
    `follow`) and print where it runs. Exit 0 running, 1 failed or refused."""
    from orchestrator.cli import snapshot
    name = name or directory.resolve().name
    try:
        taken = snapshot.take(directory.resolve(), name)
    except snapshot.SnapshotError as exc:
        print(f"preview-orchestrator: {exc}", file=sys.stderr)
        return 1
    response = _request("POST", url, "/api/previews", timeout=30, body={
        "path": str(taken.repository), "name": name, "pr": pr, "branch": taken.branch, "sha": taken.sha})
    if response.status_code != 202:
        print(f"preview-orchestrator: {_error(response)}", file=sys.stderr)
        return 1
    accepted = response.json()
    deployment = accepted["deploymentId"]
    print(f"{deployment}: deploying {directory} (snapshot {taken.sha[:7]})"
          + ("" if follow else f"; follow the build with: preview-orchestrator logs {deployment} -f"), flush=True)
    record = _settled(url, deployment, taken.sha, follow)
    if record is None:
        print(f"{deployment}: gone before it settled (removed meanwhile)", file=sys.stderr)
        return 1
    if record["status"] == "running":
        print(f"{deployment}: running at {record['url']}")
        return 0
    print(f"{deployment}: failed: {record.get('error')} (the log: preview-orchestrator logs {deployment})",
          file=sys.stderr)
    return 1


def _settled(url: str, deployment: str, sha: str, follow: bool) -> dict[str, Any] | None:
    """The record once the deploy of `sha` has ended (running or failed)."""
    seen = False
    while True:
        if follow and seen:
            show_logs(url, deployment, follow=True)  # returns when the flow has ended
            follow = False
        response = _request("GET", url, "/api/previews", timeout=30)
        records = {d["deploymentId"]: d for d in response.json()["deployments"]}
        record = records.get(deployment)
        if record is not None:
            seen = True
            if record["commitSha"] == sha and record["status"] != "building":
                return record
        elif seen:
            return None
        time.sleep(0.5)
