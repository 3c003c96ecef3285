"""An HTTP client for a code host's REST API, with what every host needs: retries of transient failures (5xx,
429, a spent rate limit) honouring Retry-After, the rate limit its answers report, conditional paged listings, and
every call counted in /metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.common.tls import shared_context
from orchestrator.observability.metrics import Metrics

log = logging.getLogger("orchestrator.codehost")

MAX_RETRIES = 3
MAX_WAIT_SECONDS = 60.0
MAX_PAGES = 50  # of a listing: 5,000 open pull requests of one repository at 100 a page
MAX_CACHED_PAGES = 5000  # conditional requests' answers kept (ETag, items)


class CodeHostError(Exception):
    """An API call that failed (after its retries)."""


@dataclass(frozen=True)
class RateLimit:
    """What the API's last answer said of its rate limit (GitHub's `x-ratelimit-*`, GitLab's `ratelimit-*`)."""

    remaining: int
    limit: int
    reset: float | None = None  # when it resets (epoch seconds)

    @property
    def low(self) -> bool:
        """Less than 5 % left (at least 50, at most half): what is left is kept for the flows' comments and
        statuses, and the reconcile waits for the reset."""
        return self.remaining < min(max(50, self.limit // 20), self.limit // 2)


class ApiClient:
    """An HTTP client for a code host's REST API: transient failures (5xx, 429, and 403 when a rate limit is
    spent) are retried at most MAX_RETRIES times with exponential backoff, honouring Retry-After and
    x-ratelimit-reset. Every call is counted in `/metrics` by `kind` and status; the rate limit its answers report
    is kept (`rate_limit`)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, metrics: Metrics, retry_base: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep, transport: httpx.BaseTransport | None = None) -> None:
        self._metrics = metrics  # the service's (`po_codehost` is given it): every call is counted there
        self._client = httpx.Client(base_url=base_url, headers={"User-Agent": "preview-orchestrator", **headers},
                                    timeout=15.0, transport=transport, verify=shared_context())
        self._retry_base = retry_base
        self._sleep = sleep
        self.rate_limit: RateLimit | None = None
        self._pages: dict[str, tuple[str, list[Any], str | None]] = {}  # page URL -> (ETag, items, next URL)

    def close(self) -> None:
        self._client.close()

    def request(self, kind: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = self._client.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                self._metrics.codehost_calls.labels(kind, "unreachable").inc()
                if attempt == MAX_RETRIES:
                    raise CodeHostError(f"{method} {url}: {type(exc).__name__}") from None
                wait = self._retry_base * (2**attempt)
            else:
                self._metrics.codehost_calls.labels(kind, str(response.status_code)).inc()
                self.rate_limit = _rate_limit(response) or self.rate_limit
                if not _transient(response) or attempt == MAX_RETRIES:
                    return response
                wait = _server_wait(response) or self._retry_base * (2**attempt)
            self._metrics.codehost_retries.labels(kind).inc()
            log.warning("code host %s %s: retry %d in %.1fs", method, url, attempt + 1, wait)
            self._sleep(min(wait, MAX_WAIT_SECONDS))
        raise AssertionError("unreachable")

    def once(self, kind: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One attempt, no retries (doctor's probes must answer quickly); httpx.HTTPError when unreachable."""
        response = self._client.request(method, url, timeout=5, **kwargs)
        self._metrics.codehost_calls.labels(kind, str(response.status_code)).inc()
        return response

    def paged(self, kind: str, path: str, params: Mapping[str, Any],
              headers: Mapping[str, str] | None = None) -> list[Any]:
        """Every item of a listing that pages with `Link: <…>; rel="next"` (GitHub, Gitea, GitLab), each page asked
        conditionally: one unchanged since the last call (304 to If-None-Match) is the last answer's (GitHub does
        not count those against the rate limit). The next page is asked of the API's own scheme, host and port
        whatever host Link names. CodeHostError when a page fails or is not a list, or there are more than
        MAX_PAGES pages: a listing is complete or it is nothing."""
        url = str(self._client.build_request("GET", path, params=dict(params)).url)
        origin = httpx.URL(url).copy_with(path="/", query=None)
        items: list[Any] = []
        for _ in range(MAX_PAGES):
            cached = self._pages.get(url)
            extra = {**(headers or {}), **({"If-None-Match": cached[0]} if cached else {})}
            response = self.request(kind, "GET", url, headers=extra)
            if response.status_code == 304 and cached:
                page, following = cached[1], cached[2]
            else:
                try:
                    page = self.check(response).json()
                except ValueError:
                    page = None
                if not isinstance(page, list):
                    raise CodeHostError(f"GET {response.request.url.path}: not a list")
                following = response.links.get("next", {}).get("url")
                if response.headers.get("etag"):
                    if len(self._pages) >= MAX_CACHED_PAGES:
                        self._pages.clear()
                    self._pages[url] = (response.headers["etag"], page, following)
            items.extend(page)
            if not following:
                return items
            # The next page's path and query, asked of the API's own address: a host behind a proxy names its public
            # address in Link, and the token goes nowhere else whatever Link says.
            next_url = httpx.URL(following)
            url = str(origin.copy_with(path=next_url.path, query=next_url.query or None))
        raise CodeHostError(f"GET {path}: more than {MAX_PAGES} pages")

    @staticmethod
    def check(response: httpx.Response) -> httpx.Response:
        """The response, or CodeHostError for a status of 300 or more."""
        if response.status_code >= 300:
            raise CodeHostError(f"{response.request.method} {response.request.url.path}: {response.status_code}")
        return response


def _transient(response: httpx.Response) -> bool:
    if response.status_code >= 500 or response.status_code == 429:
        return True
    return response.status_code == 403 and (
        response.headers.get("x-ratelimit-remaining") == "0" or "retry-after" in response.headers
    )


def _rate_limit(response: httpx.Response) -> RateLimit | None:
    for prefix in ("x-ratelimit-", "ratelimit-"):  # GitHub's, GitLab's
        remaining, limit = response.headers.get(f"{prefix}remaining"), response.headers.get(f"{prefix}limit")
        if remaining and limit and remaining.strip().isdigit() and limit.strip().isdigit():
            reset = response.headers.get(f"{prefix}reset", "")
            return RateLimit(int(remaining), int(limit), float(reset) if reset.strip().isdigit() else None)
    return None


def _server_wait(response: httpx.Response) -> float | None:
    retry_after = response.headers.get("retry-after")
    if retry_after and retry_after.strip().isdigit():
        return float(retry_after)
    reset = response.headers.get("x-ratelimit-reset")
    if reset and reset.strip().isdigit():
        return max(0.0, float(reset) - time.time())
    return None
