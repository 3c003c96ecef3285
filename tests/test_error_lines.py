"""The failure comment's first line: the line of the output that says what went wrong, for each ecosystem."""

from __future__ import annotations

import pytest

from orchestrator.flows.comments import failed
from orchestrator.flows.error_lines import error_line

PYTHON = """app-1  | Traceback (most recent call last):
app-1  |   File "/app/main.py", line 3, in <module>
app-1  |     key = os.environ["SECRET_KEY"]
app-1  |   File "<frozen os>", line 679, in __getitem__
app-1  |     raise KeyError(key) from None
app-1  | KeyError: 'SECRET_KEY'
"""


@pytest.mark.parametrize(("output", "line"), [
    (PYTHON, "KeyError: 'SECRET_KEY'"),
    ("npm ERR! missing script: build\nnpm ERR!\nnpm ERR! A complete log of this run can be found in: /x.log",
     "npm ERR! missing script: build"),
    ("Error: Cannot find module '/app/dist/main'\n    at Module._resolveFilename (node:internal)",
     "Error: Cannot find module '/app/dist/main'"),
    ("#12 3.456 main.go:5:2: undefined: foo\n#12 ERROR: process \"/bin/sh -c go build\" did not complete "
     "successfully: exit code: 1", "main.go:5:2: undefined: foo"),
    ("listening on :8080\npanic: runtime error: index out of range [3] with length 3\n\ngoroutine 1 [running]:",
     "panic: runtime error: index out of range [3] with length 3"),
    ("thread 'main' panicked at src/main.rs:4:5:\nDATABASE_URL missing\nnote: run with `RUST_BACKTRACE=1`",
     "thread 'main' panicked at src/main.rs:4:5:"),
    ("PHP Fatal error:  Uncaught PDOException: could not find driver in /app/index.php:3", None),
    ("django.core.exceptions.ImproperlyConfigured: SECRET_KEY must not be empty",
     "django.core.exceptions.ImproperlyConfigured: SECRET_KEY must not be empty"),
    ("server started\nGET / 200", None),
])
def test_the_error_line_of_each_kind_of_output(output: str, line: str | None) -> None:
    if line is None and output.startswith("PHP"):
        line = output  # the whole line is the error
    assert error_line(output) == line


def test_the_failure_comment_shows_the_error_line_before_the_tail() -> None:
    body = failed("app exited with code 1", "a" * 40, PYTHON, 12.0)
    assert body.index("KeyError: 'SECRET_KEY'") < body.index("Last lines of the log")
    assert body.count("KeyError: 'SECRET_KEY'") == 2  # the line on top, and in the tail where it came from


def test_a_tail_without_an_error_line_is_shown_alone() -> None:
    body = failed("Health check timeout", "a" * 40, "GET /never 404\nGET /never 404")
    assert body.count("GET /never 404") == 2 and body.count("```") == 2


def test_a_pull_that_failed_is_named_after_the_spec_s_message() -> None:
    from orchestrator.flows.error_lines import with_pull_error

    buildkit = ("#2 [internal] load metadata for 127.0.0.1:9/team/base:1\n#2 ERROR: failed to do request: Head "
                "\"http://127.0.0.1:9/v2/team/base/manifests/1\": dial tcp 127.0.0.1:9: connect: connection refused\n"
                "failed to solve: rpc error: code = Unknown desc = failed to solve with frontend dockerfile.v0: failed "
                "to create LLB definition: failed to do request: Head \"http://127.0.0.1:9/v2/team/base/manifests/1\": "
                "dial tcp 127.0.0.1:9: connect: connection refused\n")
    assert with_pull_error("Docker build failed", buildkit) == (
        "Docker build failed: failed to do request: Head \"http://127.0.0.1:9/v2/team/base/manifests/1\": dial tcp "
        "127.0.0.1:9: connect: connection refused")
    compose = (" cache Pulling \n cache Error Get \"http://127.0.0.1:9/v2/\": dial tcp 127.0.0.1:9: connect: "
               "connection refused\nError response from daemon: Get \"http://127.0.0.1:9/v2/\": dial tcp "
               "127.0.0.1:9: connect: connection refused\n")
    assert with_pull_error("Containers failed to start", compose) == (
        "Containers failed to start: the image of service cache could not be pulled: Get \"http://127.0.0.1:9/v2/\": "
        "dial tcp 127.0.0.1:9: connect: connection refused")
    denied = "#3 ERROR: pull access denied, repository does not exist or may require authorization\n"
    assert with_pull_error("Docker build failed", denied).endswith(": pull access denied, repository does not exist "
                                                                    "or may require authorization")
    # a build that failed for the repository's own reasons keeps the spec's message alone
    assert with_pull_error("Docker build failed", "#9 12.3 npm ERR! missing script: build\n") == "Docker build failed"
