"""A Dockerfile's text read as BuildKit reads it: its lines (split on \n only), its parser directives, and its
instructions with their line continuations joined (the file's escape character; comment and empty lines inside a
continuation skipped). What the policy (dockerfile_policy.py) judges and what the cache-mount rewrite
(dockerfile_cache.py) rewrites are these instructions, not the lines a reader sees."""

from __future__ import annotations

import re
from collections.abc import Iterator

# `# escape=\`` and the like: parser directives, only before anything else of the file
_DIRECTIVE = re.compile(r"^#\s*([A-Za-z]+)\s*=\s*(\S+)\s*$")
_COMMENT = re.compile(r"^[ \t\r\f\v]*#")


def lines_of(text: str) -> list[str]:
    """The file's lines as BuildKit splits them: on \n only, each with its end."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


def directives_of(text: str) -> dict[str, list[str]]:
    """The parser directives (`# escape=`, `# syntax=`) at the top of the file: each lower-case name's values."""
    found: dict[str, list[str]] = {}
    for line in text.removeprefix("\ufeff").split("\n"):
        directive = _DIRECTIVE.match(line.rstrip("\r"))
        if directive is None:
            break
        found.setdefault(directive[1].lower(), []).append(directive[2])
    return found


def escape_of(directives: dict[str, list[str]]) -> str:
    """The escape character the file's `# escape=` directive sets (a backslash unless it says a backtick)."""
    return next((value for value in directives.get("escape", []) if value in ("\\", "`")), "\\")


def logical_instructions(text: str) -> list[str]:
    """Every instruction of `text` as BuildKit reads it, continuations joined (comment and empty lines left out)."""
    escape = escape_of(directives_of(text))
    return [logical for _, _, logical in instructions(lines_of(text), escape) if logical is not None]


def instructions(lines: list[str], escape: str) -> Iterator[tuple[int, int, str | None]]:
    """Each instruction as BuildKit reads it — (its first line, the line after it, its logical text) — and each
    empty or comment line between them, with None for its text."""
    index = 0
    while index < len(lines):
        start = index
        if not lines[index].strip() or _COMMENT.match(lines[index]):
            index += 1
            yield start, index, None
            continue
        logical, index = instruction(lines, index, escape)
        yield start, index, logical


def continues(line: str, escape: str) -> bool:
    return line.rstrip(" \t\r\n").endswith(escape)


def instruction(lines: list[str], index: int, escape: str) -> tuple[str, int]:
    """The logical instruction starting at `index` (continuations joined, comment and empty lines inside them
    skipped, as BuildKit reads it) and the index after it."""
    parts: list[str] = []
    line = lines[index]
    index += 1
    while continues(line, escape):
        parts.append(line.rstrip(" \t\r\n")[:-1])
        while index < len(lines) and (not lines[index].strip() or _COMMENT.match(lines[index])):
            index += 1
        if index >= len(lines):
            line = ""
            break
        line = lines[index]
        index += 1
    parts.append(line.rstrip("\r\n"))
    return "".join(parts), index


def joined(text: str, escape: str) -> str:
    """The file with its line continuations joined (for looking, not for running)."""
    return re.sub(re.escape(escape) + r"[ \t]*\r?\n", "", text)
