"""A preview's activity file (with sleep): nginx logs each request that reaches the app to it, and its time is
when the preview was last used; the sleep flow reads it, and empties it so that it never grows."""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator.common.naming import preview_name

ACTIVITY_DIR = "activity"  # PROXY_CONFIG_DIR/activity/{slug}-pr-{N}.log: no `include` matches it


class ActivityFiles:
    """The activity files of the routes in `config_dir` (a base of Proxy)."""

    config_dir: Path

    def activity_path(self, slug: str, pr: int) -> Path:
        """The preview's activity file: nginx logs each request that reaches the app to it (with sleep)."""
        return self.config_dir / ACTIVITY_DIR / f"{preview_name(slug, pr)}.log"

    def last_activity(self, slug: str, pr: int) -> float | None:
        """When a request last reached the preview's app through nginx (the activity file's time, Unix seconds);
        None when the route keeps no activity file (written before sleep was switched on).

        The file is emptied on the way, keeping its time: its lines are not needed (they may hold the comment's
        token) and it must not grow. nginx appends through the descriptor it opened, so a line written meanwhile
        lands in the emptied file; its time is then the newer one."""
        path = self.activity_path(slug, pr)
        try:
            seen = path.stat()
            if seen.st_size:
                os.truncate(path, 0)  # moves the file's time: put back, unless a request came in meanwhile
                os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
                if path.stat().st_size:
                    os.utime(path)
                    return time.time()
        except FileNotFoundError:
            return None
        return seen.st_mtime

    def mark_activity(self, slug: str, pr: int) -> None:
        """Count now as the preview's last request (it was just woken)."""
        path = self.activity_path(slug, pr)
        if path.exists():
            os.utime(path)

    def _create_activity(self, slug: str, pr: int) -> None:
        """The activity file, the service's own (0600; nginx's master, root, opens it for its workers), made
        before nginx would make it so that the service may empty it; an existing one keeps its time."""
        path = self.activity_path(slug, pr)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
