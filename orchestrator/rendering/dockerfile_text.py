"""A Dockerfile's text read as BuildKit reads it: its lines (split on \n only, a byte-order mark dropped at the start),
its parser directives, and its instructions with their line continuations joined (the file's escape character;
comment and empty lines inside a continuation skipped), with or without the bodies of heredocs (`RUN <<EOF`). What
the policy (dockerfile_policy.py) judges and what the cache-mount rewrite (dockerfile_cache.py) rewrites are these
instructions, not the lines a reader sees.

Where BuildKit's versions, its syntax detection or its lexer could read a file otherwise than this module does, the
file is refused rather than judged on a guess (dockerfile_doubts.py `unreadable`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

BOM = "\ufeff"
# BuildKit's own directive line (after the leading spaces it strips): `# name = value`, its value stripped by
# `directives_of` (a lazy value before `\s*$` backtracks quadratically). AMBIGUOUS refuses other spaces first.
_DIRECTIVE = re.compile(r"#[ \t\r]*([a-zA-Z][a-zA-Z0-9]*)[ \t\r]*=(.*)")
_KNOWN_DIRECTIVES = ("syntax", "escape", "check")
_COMMENT = re.compile(r"^[ \t\r\f\v]*#")
HEREDOC_INSTRUCTIONS = ("RUN", "COPY", "ADD")
# A shell word BuildKit takes for a heredoc (`[n]<<[-]name`), and the names this module reads: `NAME`, `"NAME"`,
# `'NAME'`
_HEREDOC_WORD = re.compile(r"\d*<<(-?)\s*([^<]*)", re.ASCII)  # Go's \d is 0-9 alone (Python's: any digit)
_HEREDOC_NAME = re.compile(r"([\"']?)([A-Za-z_][A-Za-z0-9_.-]*)\1")


class Unreadable(Exception):
    """The file could be read by BuildKit otherwise than here: refused, with the reason."""


def lines_of(text: str) -> list[str]:
    """The file's lines as BuildKit splits them: on \n only, each with its end, a byte-order mark dropped."""
    return [line for line in re.split(r"(?<=\n)", text.removeprefix(BOM)) if line]


def directives_of(text: str) -> dict[str, list[str]]:
    """The parser directives at the top of the file, as BuildKit reads them (leading spaces stripped; an unknown
    name or any other line ends them): each lower-case name's values."""
    found: dict[str, list[str]] = {}
    for line in text.removeprefix(BOM).split("\n"):
        directive = _DIRECTIVE.fullmatch(line.removesuffix("\r").lstrip())
        # BuildKit's `\s*=\s*(.+?)\s*$`: at least one character, the spaces around it dropped
        value = directive[2].strip(" \t\r") or directive[2][-1:] if directive is not None else ""
        if directive is None or not value or directive[1].lower() not in _KNOWN_DIRECTIVES:
            break
        found.setdefault(directive[1].lower(), []).append(value)
    return found


def escape_of(directives: dict[str, list[str]]) -> str:
    """The escape character the file's `# escape=` directive sets (a backslash unless it says a backtick)."""
    return next((value for value in directives.get("escape", []) if value in ("\\", "`")), "\\")


@functools.lru_cache(maxsize=4)  # a render judges one file several times (unreadable, the policy, the cache keying)
def readings(text: str) -> tuple[tuple[str, ...], ...]:
    """The file's instructions in order, read three times: with heredocs' bodies as BuildKit's frontend skips them;
    without (as a builder that knows no heredocs reads every line); and every line on its own (a frontend may find a
    heredoc this module does not — newer ones look for one after expanding variables — and end it at a line this
    module joins to the next). All are judged."""
    escape = escape_of(directives_of(text))
    lines = lines_of(text)
    joined_readings = [tuple(logical for _, _, logical in instructions(lines, escape, heredocs) if logical is not None)
                       for heredocs in (True, False)]
    alone = tuple(line.rstrip("\r\n") for line in lines if line.strip() and not _COMMENT.match(line))
    return (*joined_readings, alone)


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


def keyword_of(words: list[str]) -> tuple[str, list[str]]:
    """An instruction's keyword and its arguments; ONBUILD's own instruction's (it runs in a later build)."""
    at = 0
    while _upper(words[at]) == "ONBUILD" and at + 1 < len(words):  # a walk: a thousand ONBUILDs in a line
        at += 1
    return _upper(words[at]), words[at + 1:]


def _upper(word: str) -> str:
    """A keyword as BuildKit compares it: ASCII letters alone change case (Python's `upper` makes ı an I, Go's
    ToLower leaves it; the two Go maps to ASCII are refused, dockerfile_doubts.py)."""
    return word.upper() if word.isascii() else word


def _may_have_heredocs(logical: str) -> bool:  # ONBUILD's instruction too, should a frontend read one there
    words = logical.split()
    return bool(words) and keyword_of(words)[0] in HEREDOC_INSTRUCTIONS


def heredoc_markers(logical: str) -> list[tuple[bool, str]]:
    """The heredocs a RUN, COPY or ADD opens, found as BuildKit finds them (each shell word, quotes and escapes
    kept, that is `[n]<<[-]name`): (whether `<<-`, the name). Unreadable for a heredoc word whose name is not plain."""
    if not _may_have_heredocs(logical) or "<<" not in logical:
        return []
    markers = []
    words, closed = _lexed(logical, "\\", keep_quotes=True)
    if not closed:  # BuildKit's lexer fails on the line and finds no heredoc in it at all
        raise Unreadable(f"a quote that never closes in a line with << ({logical[:40]})")
    for word in words:
        found = _HEREDOC_WORD.fullmatch(word)
        if found is None:
            if word.endswith("<<"):  # dockerfile 1.17 on joins `x<< <<A` into one word: no heredoc to it
                raise Unreadable(f"a << that ends a word ({word[:40]}; write <<NAME)")
            continue  # `<<<`, `$((1<<3))`, a quoted `"<<EOF"`: no heredoc to BuildKit either
        plain = _HEREDOC_NAME.fullmatch(found[2])
        if plain is None:
            raise Unreadable(f"a heredoc the service cannot read ({word[:40]}; write <<NAME, <<-NAME or <<'NAME')")
        markers.append((found[1] == "-", plain[2]))
    return markers


def _after_heredocs(lines: list[str], index: int, logical: str) -> int:
    """The line after the bodies of `logical`'s heredocs: each ends at a line that is its name (leading tabs
    dropped for `<<-`), as BuildKit reads them, with no continuation or comment inside. Unreadable when one never
    ends."""
    for chomp, name in heredoc_markers(logical):
        while True:
            if index >= len(lines):
                raise Unreadable(f"a heredoc that never ends (<<{name})")
            line = lines[index].rstrip("\r\n")
            index += 1
            if (line.lstrip("\t") if chomp else line) == name:
                break
    return index


def shell_words(text: str, escape: str, keep_quotes: bool) -> list[str]:
    """`text` split into words as BuildKit's lexer splits them: on spaces and tabs outside quotes, the escape
    character taking the next character as it is (not inside single quotes). `keep_quotes`: the quotes and escape
    characters stay in the words (as BuildKit looks for heredocs); else removed (as ARG and ENV values get them)."""
    return _lexed(text, escape, keep_quotes)[0]


def _lexed(text: str, escape: str, keep_quotes: bool) -> tuple[list[str], bool]:
    """`shell_words`, and whether every quote closed."""
    words: list[str] = []
    word: list[str] = []
    quote = ""
    started = False
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if quote:
            if char == quote:
                quote = ""
                if keep_quotes:
                    word.append(char)
            elif char == escape and quote == '"' and index < len(text):
                word.extend([char, text[index]] if keep_quotes else [text[index]])
                index += 1
            else:
                word.append(char)
        elif char in " \t\r\n":
            if started:
                words.append("".join(word))
            word, started = [], False
        elif char in "\"'":
            quote, started = char, True
            if keep_quotes:
                word.append(char)
        elif char == escape and index < len(text):
            word.extend([char, text[index]] if keep_quotes else [text[index]])
            index += 1
            started = True
        else:
            word.append(char)
            started = True
    if started:
        words.append("".join(word))
    return words, not quote


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
