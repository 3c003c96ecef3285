"""What a Dockerfile may not do, judged on its instructions as BuildKit reads them (dockerfile_text.py: continuations
joined, comment lines inside them skipped) with its variables expanded as BuildKit would expand them: name the
service's namespace of built images (po-build/) or an image by its id (which Docker resolves against every local
image, another preview's built one too) as a base or a source. A repository's Dockerfile, its dockerfile_inline and
the service's own injected one are all judged so (the injected one takes values from the repository's files). Cache
mounts are made the repository's own by dockerfile_cache.py."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from orchestrator.common.checkout_paths import read_beneath
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.plugin_api.types import BUILT_IMAGES
from orchestrator.rendering.dockerfile_doubts import unreadable
from orchestrator.rendering.dockerfile_text import (
    Unreadable,
    directives_of,
    escape_of,
    instructions,
    joined,
    keyword_of,
    lines_of,
    logical_instructions,
    readings,
)
from orchestrator.rendering.dockerfile_variables import MAX_EXPANSIONS, expansions, unquoted, variable_values

MAX_DOCKERFILE_BYTES = 1024 * 1024  # a Dockerfile or dockerfile_inline larger than this is refused, not cut
# An image id or a prefix of one, which Docker resolves against every local image: a built image of another preview
# too, whatever its name. Refused as `image:`, `FROM`, `COPY --from` and a mount's `from=`.
IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{1,64}", re.IGNORECASE)
# What a base or a source may be written with: a reference's characters and the variable forms dockerfile_variables.py
# expands. BuildKit's lexer removes quotes and escapes (`po-"build"/…`, `po-b\\uild/…`): a name written so is
# refused, unless its only quoting is balanced double quotes (dockerfile_variables.unquoted removes them as it does).
_PLAIN_SOURCE = re.compile(r"[A-Za-z0-9._:/@+${}-]*")


def judged_dockerfile(root: Path, path: Path, shown: str, build_args: Mapping[str, str | None] | None = None,
                      platform: Mapping[str, frozenset[str]] | None = None) -> str:
    """A repository's Dockerfile at `path`, inside the checkout `root`, read once (`read_beneath`: no link swapped in
    after the check is followed) and judged (`text_problems`, with what its build passes as `build_args`, and
    `platform`): the text to build from. ConfigError with the problems."""
    try:
        data = read_beneath(root, path, MAX_DOCKERFILE_BYTES)
    except OSError as exc:
        raise ConfigError([f"{shown} cannot be read ({exc.strerror})"]) from None
    if len(data) > MAX_DOCKERFILE_BYTES:  # BuildKit reads all of it: what is judged must be all of it
        raise ConfigError([f"{shown} is larger than {MAX_DOCKERFILE_BYTES // 1024} KiB"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # BuildKit reads bytes: what is judged must be what it reads
        raise ConfigError([f"{shown} is not UTF-8"]) from None
    if problems := text_problems(text, shown, build_args, platform=platform):
        raise ConfigError(problems)
    return text


def text_problems(text: str, shown: str, build_args: Mapping[str, str | None] | None = None,
                  allowed: str | None = None, platform: Mapping[str, frozenset[str]] | None = None) -> list[str]:
    """A Dockerfile may not name the service's namespace of built images or an image id as a base (FROM) or a
    source (`COPY --from`, `RUN --mount=from=`), written out or through a variable (an ARG's or ENV's value, a
    build argument): another preview's image would be its base or source. `allowed`: the one po-build/ image it may
    name (a pull request's injected Dockerfile starts from its base preview's kept dependencies). `platform`: the
    values of the platform's arguments (NATIVE_PLATFORM where the compose file chooses none; None: refused). A file
    BuildKit could read otherwise than dockerfile_text.py does is refused with the reason (dockerfile_doubts.py)."""
    if (reason := unreadable(text)) is not None:
        return [f"{shown}: {reason}"]
    looked_at = text.replace(allowed, "") if allowed else text
    if names_built_images(looked_at):
        return [f"{shown} may not name {BUILT_IMAGES}/ (it holds the images built for previews)"]
    escape = escape_of(directives_of(text))
    budget = [MAX_EXPANSIONS]  # for the whole file: many sources of few values each add up too
    for reading in readings(text):
        if problem := _reading_problem([words for logical in reading if (words := logical.split())], shown,
                                       build_args or {}, allowed, escape, budget, platform or {}):
            return [problem]
    return []


def _reading_problem(instructions: list[list[str]], shown: str, build_args: Mapping[str, str | None],
                     allowed: str | None, escape: str, budget: list[int],
                     platform: Mapping[str, frozenset[str]]) -> str | None:
    values = variable_values(instructions, build_args, escape)
    for written, excused in _sources(instructions):
        source = unquoted(written)
        if not _PLAIN_SOURCE.fullmatch(source):
            return (f"{shown}: an image may be named only with a reference's characters and $NAME, ${{NAME}} or "
                    f"${{NAME:-default}} ({source[:60]}: BuildKit would remove quotes and escapes the policy does not)")
        try:
            expanded = expansions(source, values, budget, platform)
        except ValueError as exc:
            return f"{shown}: {exc}"
        for value in expanded:
            if not _PLAIN_SOURCE.fullmatch(value) or "$" in value:
                return f"{shown}: an image named through a variable with characters of no reference ({source[:60]})"
            if value != allowed and f"{BUILT_IMAGES}/" in value.lower():  # plain (above): no continuation in it
                return f"{shown} may not name {BUILT_IMAGES}/ (it holds the images built for previews)"
            if IMAGE_ID.fullmatch(_normalized(value)) and value not in excused:
                return (f"{shown} may not name an image by its id ({value[:20]}: it names whatever image the host has; "
                        "a stage named with hex digits alone reads as one too, so rename it)")
    return None


def _normalized(reference: str) -> str:
    """An image reference as BuildKit looks it up, without what it adds to a bare name (docker.io/library/, the
    tag latest), so that `docker.io/library/3f2a:latest` is judged as `3f2a`."""
    lowered = reference.lower()
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        lowered = lowered.removeprefix(prefix)
    return lowered.removeprefix("library/").removesuffix(":latest")


def build_args(args: object) -> dict[str, str | None]:
    """A compose build's `args` (a mapping, or a list of `NAME=value`) as a mapping, for `text_problems`."""
    if isinstance(args, dict):
        return {str(name): None if value is None else str(value) for name, value in args.items()}
    if isinstance(args, list):
        return {name: value for name, _, value in (str(item).partition("=") for item in args)}
    return {}


def names_built_images(text: str) -> bool:
    """Whether `text` names po-build/, in its lines or in its instructions as BuildKit joins them (across a
    continuation with spaces after the escape character, comment or empty lines inside it, CRLF line ends)."""
    lowered = text.lower()
    needle = f"{BUILT_IMAGES}/"
    if needle in lowered or needle in lowered.replace("\\\n", "").replace("`\n", ""):
        return True
    escape = escape_of(directives_of(text))
    if needle in joined(lowered, escape):
        return True
    try:
        logical = logical_instructions(text)
    except Unreadable:  # a heredoc that never ends: `unreadable` refuses the file; its lines are looked at here
        logical = [text for _, _, text in instructions(lines_of(text), escape) if text is not None]
    return any(needle in instruction.lower() for instruction in logical)


def _sources(instructions: list[list[str]]) -> Iterable[tuple[str, set[str]]]:
    """Every image a build may start from or read — FROM's image, `COPY|ADD --from=`, a RUN mount's `from=` — with
    the id-like values that name a stage there instead: only `COPY --from`'s indexes of the stages before it
    (`--from=0`). A stage's name never needs to: BuildKit's stage names start with a letter, so one of hex digits
    alone (`AS beef`) is the only id-like one, and a reading out of step with BuildKit could take `FROM alpine AS
    3f2a` in a heredoc's body for a stage BuildKit never has. The set of indexes grows as stages follow: it holds
    while its source is judged (copied per instruction, such sets made 4,000 stages take seconds)."""
    indexes: set[str] = set()
    for keyword, rest in map(keyword_of, instructions):
        flags = list(itertools.takewhile(lambda word: word.startswith("--"), rest))
        if keyword == "FROM":
            arguments = rest[len(flags):]
            # `FROM image` or `FROM image AS name`: any other FROM fails the build (a heredoc's `from x import y`
            # read by a builder without heredocs), so it names nothing
            if len(arguments) == 1 or (len(arguments) == 3 and arguments[1].upper() == "AS"):
                yield arguments[0], set()
            indexes.add(str(len(indexes)))
            continue
        for flag in flags:
            name, _, value = flag[2:].partition("=")
            if keyword in ("COPY", "ADD") and name.lower() == "from":
                yield value, indexes
            elif keyword == "RUN" and name.lower() == "mount":  # a mount names a stage by its name, never its index
                for option in value.split(","):
                    key, _, item = option.partition("=")
                    if key.strip().lower() == "from":
                        yield item.strip(), set()
