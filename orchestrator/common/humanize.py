"""How long ago, for people: the dashboard and `preview-orchestrator list` show ages the same way."""

from __future__ import annotations

from datetime import datetime


def age(created: datetime, now: datetime) -> str:
    """`45s`, `12m`, `1h30m`, `2d01h`."""
    seconds = max(0, int((now - created).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
