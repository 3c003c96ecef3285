"""httpx's calls for the tests, with the process's one TLS context. httpx builds a context for every call and client
otherwise, loading the whole CA bundle (about 20 ms of CPU): the tests' polls spent a fifth of the suite's CPU on it
(measured with `perf record -a` over a whole run). Everything else is httpx's own: same arguments, same answers."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import httpx

from orchestrator.common.tls import shared_context


def get(url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=shared_context(), **kwargs)


def post(url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=shared_context(), **kwargs)


def delete(url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
    return httpx.delete(url, verify=shared_context(), **kwargs)


def stream(method: str, url: str | httpx.URL, **kwargs: Any) -> AbstractContextManager[httpx.Response]:
    return httpx.stream(method, url, verify=shared_context(), **kwargs)


def Client(**kwargs: Any) -> httpx.Client:  # noqa: N802 - stands for httpx.Client
    return httpx.Client(verify=shared_context(), **kwargs)
