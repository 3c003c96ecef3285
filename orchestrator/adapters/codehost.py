"""The code host's REST API (GitHub's shape): one comment per pull request, created then edited, and a
deployment per head commit with statuses (the pull request's "View deployment" button).

Transient failures (5xx, 429, and 403 when the rate limit is spent) are retried at most 3 times with
exponential backoff, honouring Retry-After and x-ratelimit-reset. A comment that cannot be posted is logged
by the caller and never fails a deploy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from orchestrator.observability.metrics import Metrics

log = logging.getLogger("orchestrator.adapters.codehost")

MAX_RETRIES = 3
MAX_WAIT_SECONDS = 60.0


class CodeHostError(Exception):
    pass


class CodeHost:
    def __init__(self, api_url: str, token: str, retry_base: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep, transport: httpx.BaseTransport | None = None,
                 metrics: Metrics | None = None) -> None:
        self._metrics = metrics or Metrics()
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                   "User-Agent": "preview-orchestrator"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(base_url=api_url, headers=headers, timeout=15.0, transport=transport)
        self._retry_base = retry_base
        self._sleep = sleep

    def close(self) -> None:
        self._client.close()

    def upsert_comment(self, owner: str, repo: str, pr: int, comment_id: int | None, body: str) -> int:
        """Edit comment `comment_id` (or create one if it is None or was deleted); returns the comment id."""
        if comment_id is not None:
            response = self._request("comment", "PATCH", f"/repos/{owner}/{repo}/issues/comments/{comment_id}",
                                     json={"body": body})
            if response.status_code != 404:
                self._check(response)
                return comment_id
        response = self._request("comment", "POST", f"/repos/{owner}/{repo}/issues/{pr}/comments",
                                 json={"body": body})
        self._check(response)
        return int(response.json()["id"])

    def find_marked_comment(self, owner: str, repo: str, pr: int, marker: str) -> int | None:
        """The id of the newest comment on the pull request whose body contains `marker` (the service's own
        comment), looking at the first 100 comments; None when there is none."""
        response = self._request("comment", "GET", f"/repos/{owner}/{repo}/issues/{pr}/comments",
                                 params={"per_page": 100})
        self._check(response)
        marked = [item["id"] for item in response.json() if marker in str(item.get("body", ""))]
        return int(marked[-1]) if marked else None

    def create_deployment(self, owner: str, repo: str, sha: str, environment: str, description: str) -> int:
        """A deployment of `sha` to `environment`; returns its id. No merge of the base branch and no required
        status checks: the preview deploys exactly the pushed commit."""
        response = self._request("deployment", "POST", f"/repos/{owner}/{repo}/deployments", json={
            "ref": sha, "environment": environment, "description": description[:140], "auto_merge": False,
            "required_contexts": [], "production_environment": False, "transient_environment": True,
        })
        self._check(response)
        return int(response.json()["id"])

    def set_deployment_status(self, owner: str, repo: str, deployment_id: int, state: str,
                              description: str, environment_url: str | None = None,
                              log_url: str | None = None) -> None:
        """`in_progress`, `success` (with the URL: the "View deployment" button), `failure` or `inactive`."""
        body: dict[str, Any] = {"state": state, "description": description[:140]}
        if environment_url:
            body["environment_url"] = environment_url
        if log_url:
            body["log_url"] = log_url
        response = self._request("deployment_status", "POST",
                                 f"/repos/{owner}/{repo}/deployments/{deployment_id}/statuses", json=body)
        self._check(response)

    def _request(self, kind: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = self._client.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                self._metrics.codehost_calls.labels(kind, "unreachable").inc()
                if attempt == MAX_RETRIES:
                    raise CodeHostError(f"{method} {url}: {type(exc).__name__}") from None
                wait = self._backoff(attempt)
            else:
                self._metrics.codehost_calls.labels(kind, str(response.status_code)).inc()
                if not _transient(response) or attempt == MAX_RETRIES:
                    return response
                wait = _server_wait(response) or self._backoff(attempt)
            self._metrics.codehost_retries.labels(kind).inc()
            log.warning("code host %s %s: retry %d in %.1fs", method, url, attempt + 1, wait)
            self._sleep(min(wait, MAX_WAIT_SECONDS))
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int) -> float:
        return self._retry_base * (2**attempt)

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code >= 300:
            raise CodeHostError(f"{response.request.method} {response.request.url.path}: {response.status_code}")


def _transient(response: httpx.Response) -> bool:
    if response.status_code >= 500 or response.status_code == 429:
        return True
    return response.status_code == 403 and (
        response.headers.get("x-ratelimit-remaining") == "0" or "retry-after" in response.headers
    )


def _server_wait(response: httpx.Response) -> float | None:
    retry_after = response.headers.get("retry-after")
    if retry_after and retry_after.strip().isdigit():
        return float(retry_after)
    reset = response.headers.get("x-ratelimit-reset")
    if reset and reset.strip().isdigit():
        return max(0.0, float(reset) - time.time())
    return None
