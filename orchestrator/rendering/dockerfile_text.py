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

import itertools
import re
from collections.abc import Iterator

BOM = "\ufeff"
# BuildKit's own directive line (after the leading spaces it strips): `# name = value`, its value stripped by
# `directives_of` (a lazy value before `\s*$` backtracks quadratically). AMBIGUOUS refuses other spaces first.
_DIRECTIVE = re.compile(r"#[ \t\r]*([a-zA-Z][a-zA-Z0-9]*)[ \t\r]*=(.*)")
_KNOWN_DIRECTIVES = ("syntax", "escape", "check")
_COMMENT = re.compile(r"^[ \t\r\f\v]*#")
# Characters Python and BuildKit (Go) read differently as line breaks or spaces, a byte-order mark past the start, a
# carriage return not ending a line: a file with one is refused, so the lines read here are BuildKit's lines.
AMBIGUOUS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
                       f"{BOM}]|\r(?!\n|$)")
# `# syntax=`: BuildKit's own Dockerfile frontend only. Another frontend image would build whatever it likes.
SYNTAX = re.compile(r"^(?:docker\.io/)?docker/dockerfile(?:-upstream)?:[0-9][\w.-]*(?:@sha256:[0-9a-f]{64})?$")
# Where BuildKit's syntax detection looks besides `# syntax=`: `// syntax=`, after a `#!` line, in a JSON object.
# Spaces and tabs only, within a line: `\s` would match line breaks too and backtrack quadratically over a run of
# empty lines (a 1 MiB file of them held the service's threads for hours).
_SYNTAX_ANYWHERE = re.compile(r"^[ \t]*(?:#|//)[ \t]*syntax[ \t]*=", re.IGNORECASE | re.MULTILINE)
_ESCAPE_ANYWHERE = re.compile(r"^[ \t]*#[ \t]*escape[ \t]*=", re.IGNORECASE | re.MULTILINE)
_HEREDOC_INSTRUCTIONS = ("RUN", "COPY", "ADD")
# A shell word BuildKit takes for a heredoc (`[n]<<[-]name`), and the names this module reads: `NAME`, `"NAME"`,
# `'NAME'`
_HEREDOC_WORD = re.compile(r"\d*<<(-?)\s*([^<]*)")
_HEREDOC_NAME = re.compile(r"([\"']?)([A-Za-z_][A-Za-z0-9_.-]*)\1")
# What a flag word (`--name=value` before an instruction's arguments) may hold: BuildKit reads those byte by byte,
# taking quotes and backslashes away and the bytes 0x85 and 0xA0 of a UTF-8 character for spaces
_FLAG_WORD = re.compile(r"--[\x21-\x7e]*")
_UNSAFE_IN_FLAG = re.compile(r"[\"'\\`]")
# The instructions whose flags name sources (FROM --platform aside): their flag words are judged
_FLAGGED_INSTRUCTIONS = ("FROM", "COPY", "ADD", "RUN")
# The two characters Go's strings.ToLower turns into ASCII letters (İ to i, the Kelvin sign to k): in a keyword
# they make one BuildKit knows (ONBUİLD) of a word this module takes for none
_LOWERS_TO_ASCII = re.compile("[\u0130\u212a]")


class Unreadable(Exception):
    """The file could be read by BuildKit otherwise than here: refused, with the reason."""


def unreadable(text: str) -> str | None:
    """Why BuildKit might read `text` otherwise than this module (None: it reads it as here)."""
    body = text.removeprefix(BOM)
    if AMBIGUOUS.search(body):
        return "control characters or unusual spaces are not allowed (nor a carriage return inside a line)"
    if body.startswith("#!"):
        return "a first line starting #! is not allowed (BuildKit looks for a frontend after it)"
    # BuildKit (v0.11 on) looks for a frontend in a file that is a JSON object, whatever its depth (Go's reader
    # takes 10,000 levels, Python's fewer): a Dockerfile cannot start with `{`, so none is read as JSON here
    if body.lstrip(" \t\r\n").startswith("{"):
        return "a Dockerfile written as JSON is not allowed (BuildKit looks for a frontend in it)"
    if _variable_mount(body):
        return ("a --mount with a variable is not allowed (a frontend that expands it could make it a cache mount "
                "the service did not key)")
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
    if any(line.removesuffix("\n").removesuffix("\r").rstrip(" \t").endswith(escape * 2) for line in lines_of(text)):
        return (f"a line that ends in {escape}{escape} is not allowed (BuildKit's versions disagree whether it "
                "continues)")
    try:
        for reading in readings(text):
            for logical in reading:
                if (problem := _instruction_problem(logical)) is not None:
                    return problem
    except Unreadable as exc:
        return str(exc)
    return None


def _instruction_problem(logical: str) -> str | None:
    """Why BuildKit might read one instruction (or one line read alone) otherwise than this module."""
    words = logical.split()
    if not words:
        return None
    keyword, rest = keyword_of(words)
    for word in words[:len(words) - len(rest)]:  # ONBUILD and the instruction it holds
        if _LOWERS_TO_ASCII.search(word):
            return f"an instruction's keyword with a character Go lower-cases to ASCII ({word[:30]})"
    if keyword not in _FLAGGED_INSTRUCTIONS:  # a continuation line read alone (`  --prefix=/usr \\`) has no flags
        return None
    for word in itertools.takewhile(lambda w: w.startswith("--"), rest):
        if not _FLAG_WORD.fullmatch(word) or _UNSAFE_IN_FLAG.search(word):
            return (f"a flag with quotes, escapes or characters other than ASCII ({word[:40]}; BuildKit reads flags "
                    "otherwise)")
    # Newer frontends look for heredocs after expanding `${NAME:-word}` with no variables set: a `<` in such a line
    # could open a heredoc that ends where this module joins a continuation, and hide what follows
    if keyword in _HEREDOC_INSTRUCTIONS and "${" in logical and "<" in logical:
        return (f"a {keyword} with both ${{...}} and < is not allowed (a frontend may find a heredoc in the "
                "expanded line that the service does not)")
    return None


def _variable_mount(body: str) -> bool:
    """Whether a word of `body` holds `--mount=` with a `$` after it (anywhere: on a line this module joins and a
    frontend may not). Word by word: a pattern `--mount=\\S*\\$` backtracks quadratically over repeated mounts."""
    for word in re.finditer(r"\S+", body):
        lowered = word[0].lower()
        if (at := lowered.find("--mount=")) >= 0 and "$" in lowered[at:]:
            return True
    return False


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


def readings(text: str) -> list[list[str]]:
    """The file's instructions in order, read three times: with heredocs' bodies as BuildKit's frontend skips them;
    without (as a builder that knows no heredocs reads every line); and every line on its own (a frontend may find a
    heredoc this module does not — newer ones look for one after expanding variables — and end it at a line this
    module joins to the next). All are judged."""
    escape = escape_of(directives_of(text))
    lines = lines_of(text)
    joined_readings = [[logical for _, _, logical in instructions(lines, escape, heredocs) if logical is not None]
                       for heredocs in (True, False)]
    alone = [line.rstrip("\r\n") for line in lines if line.strip() and not _COMMENT.match(line)]
    return [*joined_readings, alone]


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
    keyword, rest = words[0].upper(), words[1:]
    while keyword == "ONBUILD" and rest:  # a loop: a thousand ONBUILDs in a line must not exhaust the stack
        keyword, rest = rest[0].upper(), rest[1:]
    return keyword, rest


def _may_have_heredocs(logical: str) -> bool:  # ONBUILD's instruction too, should a frontend read one there
    words = logical.split()
    return bool(words) and keyword_of(words)[0] in _HEREDOC_INSTRUCTIONS


def heredoc_markers(logical: str) -> list[tuple[bool, str]]:
    """The heredocs a RUN, COPY or ADD opens, found as BuildKit finds them (each shell word, quotes and escapes
    kept, that is `[n]<<[-]name`): (whether `<<-`, the name). Unreadable for a heredoc word whose name is not plain."""
    if not _may_have_heredocs(logical) or "<<" not in logical:
        return []
    markers = []
    for word in shell_words(logical, "\\", keep_quotes=True):
        found = _HEREDOC_WORD.fullmatch(word)
        if found is None:
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
    return words


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
