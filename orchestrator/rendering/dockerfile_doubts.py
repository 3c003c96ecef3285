"""What BuildKit's versions, its syntax detection or its lexer could read otherwise than dockerfile_text.py does: a
file with any of it is refused (`unreadable`), with the reason, rather than judged on a guess — another frontend
named anywhere BuildKit looks for one, a directive it might take and the reader would not, a line that ends in an
escaped escape character (one version continues it, the next does not), a carriage return inside a line, flags
BuildKit's flag reader reads otherwise, a heredoc a frontend could find where the reader does not."""

from __future__ import annotations

import itertools
import re

from orchestrator.rendering.dockerfile_text import (
    BOM,
    HEREDOC_INSTRUCTIONS,
    Unreadable,
    directives_of,
    escape_of,
    heredoc_markers,
    keyword_of,
    lines_of,
    readings,
)

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
# What a flag word (`--name=value` before an instruction's arguments) may hold: BuildKit reads those byte by byte,
# taking quotes and backslashes away and the bytes 0x85 and 0xA0 of a UTF-8 character for spaces
_FLAG_WORD = re.compile(r"--[\x21-\x7e]*")
_UNSAFE_IN_FLAG = re.compile(r"[\"'\\`]")
# The instructions whose flag words are judged: those whose flags name sources, and ARG and ENV, whose flags BuildKit
# takes off before their variables (a flag it splits otherwise than the service would hide one)
_FLAGGED_INSTRUCTIONS = ("FROM", "COPY", "ADD", "RUN", "ARG", "ENV")
_KEYWORDS = frozenset({"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
                       "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"})
# The two characters Go's strings.ToLower turns into ASCII letters (İ to i, the Kelvin sign to k): in a keyword
# they make one BuildKit knows (ONBUİLD) of a word the reader takes for none
_LOWERS_TO_ASCII = re.compile("[\u0130\u212a]")


def unreadable(text: str) -> str | None:
    """Why BuildKit might read `text` otherwise than dockerfile_text.py (None: it reads it as there)."""
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
                if (problem := _instruction_problem(logical, escape)) is not None:
                    return problem
    except Unreadable as exc:
        return str(exc)
    return None


def _instruction_problem(logical: str, escape: str) -> str | None:
    """Why BuildKit might read one instruction (or one line read alone) otherwise than dockerfile_text.py."""
    words = logical.split()
    if not words:
        return None
    # `FROM\` at a line's end: the reading of every line alone would see no FROM in it
    if words[0].endswith(escape) and words[0][:-len(escape)].upper() in _KEYWORDS:
        return f"an instruction's keyword followed at once by the escape character ({words[0][:30]})"
    keyword, rest = keyword_of(words)
    held = words[:len(words) - len(rest)]  # ONBUILD and the instruction it holds
    for word in held:
        if _LOWERS_TO_ASCII.search(word):
            return f"an instruction's keyword with a character Go lower-cases to ASCII ({word[:30]})"
    # BuildKit takes ONBUILD's own flags (`ONBUILD -- RUN …` is a RUN to it) and refuses every real one
    if len(held) > 1 and not all(word.isascii() and word.isalpha() for word in held[1:]):
        return f"ONBUILD followed by anything but an instruction's keyword ({' '.join(held)[:40]})"
    # a continuation line read alone (`  --prefix=/usr \\`) has no flags; the others' flags feed nothing judged
    if keyword not in _FLAGGED_INSTRUCTIONS:
        return None
    # BuildKit takes leading `--` words off every instruction (ARG ignores them), reading quotes, escapes and bytes
    # otherwise than the service's words (`ARG --x='\\'' P=3f2a` hid the ARG P)
    flags = list(itertools.takewhile(lambda w: w.startswith("--"), rest))
    for index, word in enumerate(flags):
        if index == len(rest) - 1 and word.endswith(escape):  # a line read alone that continues (`--mount=…\`):
            word = word[:-len(escape)]  # BuildKit drops the escape, and the joined readings judge what it joins
        if not _FLAG_WORD.fullmatch(word) or _UNSAFE_IN_FLAG.search(word):
            return (f"a flag with quotes, escapes or characters other than ASCII ({word[:40]}; BuildKit reads flags "
                    "otherwise)")
    if keyword not in HEREDOC_INSTRUCTIONS or "<" not in logical:
        return None
    heredoc_markers(logical)  # Unreadable for a heredoc whose name is not plain, in every reading
    # Newer frontends look for heredocs after expanding `${NAME:-word}` with no variables set (`<${X:-}<A` is
    # `<<A`): two `<` in such a line could open a heredoc that ends where the reader joins a continuation
    if "${" in logical and logical.count("<") >= 2:
        return (f"a {keyword} with ${{...}} and two < is not allowed (a frontend may find a heredoc in the "
                "expanded line that the service does not)")
    # The JSON form followed by `<<`: dockerfile 1.3 to 1.8 read the array and ignore the rest, later ones do not
    if rest[len(flags):] and rest[len(flags)].startswith("[") and "<<" in logical:
        return f"a {keyword} in JSON form followed by << is not allowed (BuildKit's versions read it differently)"
    return None


def _variable_mount(body: str) -> bool:
    """Whether a word of `body` holds `--mount=` with a `$` after it (anywhere: on a line dockerfile_text.py joins and a
    frontend may not). Word by word: a pattern `--mount=\\S*\\$` backtracks quadratically over repeated mounts."""
    for word in re.finditer(r"\S+", body):
        lowered = word[0].lower()
        if (at := lowered.find("--mount=")) >= 0 and "$" in lowered[at:]:
            return True
    return False
