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


# An image that could not be pulled: the registry out of reach (DNS, refused, timeout), the image or tag not there,
# access refused, the rate limit. BuildKit's, the engine's and compose's wordings.
_PULL = re.compile(r"pull access denied|failed to resolve source metadata|manifest unknown|manifest for \S+ not found"
                   r"|error pulling image|toomanyrequests|failed to do request", re.IGNORECASE)


def with_pull_error(message: str, output: str) -> str:
    """`message` (the spec's, first), followed by the line of `output` that says which image could not be pulled
    and why, when that is what failed: "Docker build failed" alone reads like the repository's fault."""
    lines = [_PREFIX.sub("", raw).strip() for raw in reversed(output.splitlines())]
    for line in lines:  # compose's progress of a service's pull: ` cache Error Get "http://…/v2/": …`
        if (pulled := _SERVICE_PULL.match(line)) is not None:
            return f"{message}: the image of service {pulled[1]} could not be pulled: {pulled[2][:250]}"
    for line in lines:
        if _PULL.search(line):
            return f"{message}: {_WRAPPERS.sub('', line)[:300]}"
    return message


_SERVICE_PULL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,62}) Error (\S.*)$")


# What the builder wraps around the cause, said before it
_WRAPPERS = re.compile(r"^(?:(?:ERROR|Error response from daemon|rpc error: code = \w+ desc =|failed to solve with "
                       r"frontend \S+|failed to create LLB definition|failed to solve)(?::\s*|\s+))+")
