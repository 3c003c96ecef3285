"""A Dockerfile's text read as BuildKit reads it: its lines (split on \n only, a byte-order mark dropped at the start),
its parser directives, and its instructions with their line continuations joined (the file's escape character;
comment and empty lines inside a continuation skipped), with or without the bodies of heredocs (`RUN <<EOF`). What
the policy (dockerfile_policy.py) judges and what the cache-mount rewrite (dockerfile_cache.py) rewrites are these
instructions, not the lines a reader sees.

Where BuildKit's versions, its syntax detection or its lexer could read a file otherwise than this module does, the
file is refused (`unreadable`) rather than judged on a guess: another frontend named anywhere BuildKit looks for
one, a directive it might take and this module would not, a line that ends in an escaped escape character (one
version continues it, the next does not), a carriage return inside a line, a `<<` in RUN, COPY or ADD that is not a
plain heredoc marker."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

BOM = "\ufeff"
# BuildKit's own directive line (after the leading spaces it strips): `# name = value`
_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$")
_KNOWN_DIRECTIVES = ("syntax", "escape", "check")
_COMMENT = re.compile(r"^[ \t\r\f\v]*#")
# Characters Python and BuildKit (Go) read differently as line breaks or spaces, a byte-order mark past the start, a
# carriage return not ending a line: a file with one is refused, so the lines read here are BuildKit's lines.
AMBIGUOUS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
                       f"{BOM}]|\r(?!\n|$)")
# `# syntax=`: BuildKit's own Dockerfile frontend only. Another frontend image would build whatever it likes.
SYNTAX = re.compile(r"^(?:docker\.io/)?docker/dockerfile(?:-upstream)?:[0-9][\w.-]*(?:@sha256:[0-9a-f]{64})?$")
# Where BuildKit's syntax detection looks besides `# syntax=`: `// syntax=`, after a `#!` line, in a JSON object
_SYNTAX_ANYWHERE = re.compile(r"^\s*(?:#|//)\s*syntax\s*=", re.IGNORECASE | re.MULTILINE)
_ESCAPE_ANYWHERE = re.compile(r"^\s*#\s*escape\s*=", re.IGNORECASE | re.MULTILINE)
_HEREDOC_INSTRUCTIONS = ("RUN", "COPY", "ADD")
# A heredoc marker this module reads: `<<NAME`, `<<-NAME`, `<<"NAME"`, `<<'NAME'`, with a file descriptor before it
_HEREDOC = re.compile(r"(?:^|(?<=\s))\d*<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_.-]*)\2(?=\s|$)")


class Unreadable(Exception):
    """The file could be read by BuildKit otherwise than here: refused, with the reason."""


def unreadable(text: str) -> str | None:
    """Why BuildKit might read `text` otherwise than this module (None: it reads it as here)."""
    body = text.removeprefix(BOM)
    if AMBIGUOUS.search(body):
        return "control characters or unusual spaces are not allowed (nor a carriage return inside a line)"
    if body.startswith("#!"):
        return "a first line starting #! is not allowed (BuildKit looks for a frontend after it)"
    try:
        if isinstance(json.loads(body), dict):
            return "a Dockerfile written as JSON is not allowed (BuildKit looks for a frontend in it)"
    except ValueError:
        pass
    directives = directives_of(text)
    syntaxes = directives.get("syntax", [])
    for syntax in syntaxes:
        if not SYNTAX.match(syntax):
            return f"# syntax={syntax[:60]} is not allowed (only BuildKit's own docker/dockerfile frontend)"
    if len(_SYNTAX_ANYWHERE.findall(body)) != len(syntaxes):
        return "a syntax line outside the file's first directives is not allowed (BuildKit may take it)"
    if len(_ESCAPE_ANYWHERE.findall(body)) != len(directives.get("escape", [])) or (
            "escape" in directives and "check" in directives):  # versions before `check` stop at it
        return "an escape directive BuildKit's versions could read differently is not allowed"
    escape = escape_of(directives)
    doubled = re.compile(re.escape(escape) * 2 + r"[ \t]*\r?$")
    if any(doubled.search(line.removesuffix("\n")) for line in lines_of(text)):
        return (f"a line that ends in {escape}{escape} is not allowed (BuildKit's versions disagree whether it "
                "continues)")
    for _, _, logical in instructions(lines_of(text), escape):
        if logical is not None and _unread_heredoc(logical):
            return "a << in RUN, COPY or ADD that is not a plain heredoc (<<NAME, <<-NAME, <<'NAME') is not allowed"
    return None


def lines_of(text: str) -> list[str]:
    """The file's lines as BuildKit splits them: on \n only, each with its end, a byte-order mark dropped."""
    return [line for line in re.split(r"(?<=\n)", text.removeprefix(BOM)) if line]


def directives_of(text: str) -> dict[str, list[str]]:
    """The parser directives at the top of the file, as BuildKit reads them (leading spaces stripped; an unknown
    name or any other line ends them): each lower-case name's values."""
    found: dict[str, list[str]] = {}
    for line in text.removeprefix(BOM).split("\n"):
        directive = _DIRECTIVE.match(line.removesuffix("\r").lstrip())
        if directive is None or directive[1].lower() not in _KNOWN_DIRECTIVES:
            break
        found.setdefault(directive[1].lower(), []).append(directive[2])
    return found


def escape_of(directives: dict[str, list[str]]) -> str:
    """The escape character the file's `# escape=` directive sets (a backslash unless it says a backtick)."""
    return next((value for value in directives.get("escape", []) if value in ("\\", "`")), "\\")


def readings(text: str) -> list[list[str]]:
    """The file's instructions in order, read twice: with heredocs' bodies as BuildKit's frontend skips them, and
    without (as a builder that knows no heredocs reads every line). Both are judged."""
    escape = escape_of(directives_of(text))
    lines = lines_of(text)
    return [[logical for _, _, logical in instructions(lines, escape, heredocs) if logical is not None]
            for heredocs in (True, False)]


def logical_instructions(text: str) -> list[str]:
    """Every instruction of `text` in either reading (`readings`)."""
    return [logical for reading in readings(text) for logical in reading]


def instructions(lines: list[str], escape: str, heredocs: bool = False) -> Iterator[tuple[int, int, str | None]]:
    """Each instruction as BuildKit reads it — (its first line, the line after it, its logical text) — and each
    empty or comment line between them, and with `heredocs` each heredoc's body, with None for its text."""
    index = 0
    while index < len(lines):
        start = index
        if not lines[index].strip() or _COMMENT.match(lines[index]):
            index += 1
            yield start, index, None
            continue
        logical, index = instruction(lines, index, escape)
        yield start, index, logical
        if heredocs:
            body = index
            index = _after_heredocs(lines, index, logical)
            if index > body:
                yield body, index, None


def _may_have_heredocs(logical: str) -> bool:
    words = logical.split(None, 2)
    if words and words[0].upper() == "ONBUILD":  # its instruction's, should a frontend read one there
        words = words[1:]
    return bool(words) and words[0].upper() in _HEREDOC_INSTRUCTIONS


def _markers(logical: str) -> list[tuple[bool, str]]:
    if not _may_have_heredocs(logical):
        return []
    return [(chomp == "-", name) for chomp, _, name in _HEREDOC.findall(logical)]


def _unread_heredoc(logical: str) -> bool:
    return _may_have_heredocs(logical) and logical.count("<<") != len(_markers(logical))


def _after_heredocs(lines: list[str], index: int, logical: str) -> int:
    """The line after the bodies of `logical`'s heredocs: each ends at a line that is its name (leading tabs
    dropped for `<<-`), as BuildKit reads them, with no continuation or comment inside."""
    for chomp, name in _markers(logical):
        while index < len(lines):
            line = lines[index].rstrip("\r\n")
            index += 1
            if (line.lstrip("\t") if chomp else line) == name:
                break
    return index


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
