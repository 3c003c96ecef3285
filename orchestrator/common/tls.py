"""The TLS context the service's HTTP clients share. httpx builds a new one for every client it makes, and building
one loads the whole CA bundle (about 20 ms of CPU); a health wait, a registry call and a code host's client each
make a client of their own."""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def shared_context() -> ssl.SSLContext:
    """httpx's default context (certificates verified against certifi's bundle), built once per process and never
    changed after: an SSLContext serves any number of connections and threads."""
    return httpx.create_ssl_context()
