"""The line of a failed build's or app's output that says what went wrong, for the top of a failure comment.

A Python traceback ends with the error (`KeyError: 'SECRET_KEY'`) after many frames; npm, Go, Rust, PHP and the
Docker builder each have their own shape. The last line that looks like an error wins: it is nearest the end."""

from __future__ import annotations

import re

# `app-1  | ` (compose logs) and `#12 3.456 ` (BuildKit) prefixes are not part of the message.
_PREFIX = re.compile(r"^(?:[\w.-]+(?:-\d+)?\s+\|\s?)?(?:#\d+\s+(?:\d+\.\d+\s+)?)?")
_ERROR = re.compile(
    r"""^(?:
        [A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Configured|DoesNotExist)\b(?::.*)?$  # Python, JS
      | (?:Error|ERROR|error|FATAL|Fatal|fatal|panic|PANIC)(?:\[[\w-]+\])?[:!\s].*   # Go, Rust, C, generic
      | npm\ (?:ERR!|error)\ .*                                          # npm
      | (?:PHP\ )?(?:Fatal\ error|Parse\ error|Uncaught\ \S+).*           # PHP
      | thread\ '.*'\ panicked\ at.*                                      # Rust
      | \S+:\d+:\d+:\ error.*                                            # compilers: file:line:col: error
      | \S+\.go:\d+:\d+:\ .*                                               # the Go compiler
      | .*\bexit(?:ed)?\ (?:with\ )?(?:code|status)\ [1-9]\d*.*            # a process that failed
    )$""",
    re.VERBOSE,
)
_NOT_ERRORS = re.compile(r"^(?:Traceback \(most recent call last\):|During handling of the above exception"
                         r"|npm (?:ERR!|error) (?:A complete log|$|code |errno )"
                         # The builder's summary of a failed step: the step's own output says more.
                         r"|ERROR: (?:failed to solve|process .* did not complete)|.*did not complete successfully)")


def error_line(output: str) -> str | None:
    """The last line of `output` that reads like an error, without log prefixes; None if none does."""
    for raw in reversed(output.splitlines()):
        line = _PREFIX.sub("", raw).strip()
        if line and not _NOT_ERRORS.match(line) and _ERROR.match(line):
            return line[:300]
    return None
