"""A URL setting's one check, for the service's settings and a plugin's own (plugin_api.own_settings)."""

from __future__ import annotations

import re


def http_url(value: str | None) -> str | None:
    """A URL setting: http:// or https:// with a host, without its trailing slash; None when empty."""
    if value in (None, ""):
        return None
    if not re.match(r"^https?://[^\s/]+", value):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")
