"""Glob patterns of repository paths, as plugins write them: `*` and `?` within one directory, `**` across any
number of them (`src/**/migrations/**`), `[...]` a set of characters. Python 3.11's PurePath.match has no `**`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 1)) > i + 1:
            body = pattern[i + 1:end]
            parts.append("[" + ("^" + re.escape(body[1:]) if body[0] == "!" else re.escape(body)) + "]")
            i = end + 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts) + r"\Z")


def matching(paths: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """The paths any of `patterns` matches, in their order."""
    compiled = [_compiled(pattern) for pattern in patterns]
    return [path for path in paths if any(c.match(path) for c in compiled)]
