"""A repository's Dockerfile's cache mounts, made its repository's own.

BuildKit keeps `RUN --mount=type=cache` caches by id (the target path when no id is given) for the whole engine:
two repositories whose Dockerfiles cache `/root/.npm` share one cache, and a pull request of one could put packages
there that the other repository's next build installs. So before a build, every cache mount of a repository's
Dockerfile gets an id keyed by its repository under the service's key (as the templates' `cache_mount` does):
the repository's previews share it, no other repository can name it, and logs and comments mask it.

The rewrite reads the file as BuildKit does (parser directives, line continuations with the file's escape
character, comment lines inside them) and allows only what it can read: a RUN's flags must be `--mount=` with
unquoted options or `--network=default|none`; anything else on a RUN with a cache mount, a cache mount in an
ONBUILD, or a `type=cache` the rewrite did not account for refuses the file with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from orchestrator.common.checkout_paths import read_beneath
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.plugin_api.types import CACHE_ID_PREFIX, RenderContext
from orchestrator.rendering.compose_document import build_dir
from orchestrator.rendering.dockerfile_doubts import unreadable
from orchestrator.rendering.dockerfile_policy import judged_dockerfile, text_problems
from orchestrator.rendering.dockerfile_text import (
    Unreadable,
    directives_of,
    escape_of,
    instructions,
    joined,
    keyword_of,
    lines_of,
    readings,
)

_SPACES = re.compile(r"\s*")
_WORD = re.compile(r"\S*")
_FLAG = re.compile(r"--([a-z-]+)=(\S*)")
_UNREADABLE = re.compile(r"[\"'\\`$]")
_CACHE = re.compile(r"type\s*=\s*cache", re.IGNORECASE)
NETWORKS = ("default", "none")
_SERVICE_CACHE_ID = re.compile(rf"{CACHE_ID_PREFIX}[0-9a-f]{{32}}")  # RenderContext.cache_mount's


class CacheMountRefused(Exception):
    """The Dockerfile has a cache mount (or a RUN flag beside one) the service cannot make the repository's own."""


def keyed_dockerfile(repo_dir: Path, dockerfile: Path, name: str, shown: str, context: RenderContext,
                     build_files: dict[str, str], build_args: Mapping[str, str | None] | None = None,
                     platform: Mapping[str, frozenset[str]] | None = None) -> str:
    """The repository's `dockerfile` as the build reads it: the service's copy of the bytes judged, its cache mounts
    keyed (and its own `.dockerignore`, which BuildKit reads beside the Dockerfile), added to `build_files` as
    `name`; the path the build must use. Always a copy, so that the file built is the file judged: compose and
    BuildKit find a Dockerfile otherwise than Python does (`a/../Dockerfile` cleaned as text, a link resolved inside
    the Dockerfile's own directory, buildx bake's templates in its path). Read once and judged
    (`judged_dockerfile`, with `build_args` and `platform`): a process a build command left running could change the
    file between two reads. ConfigError with the problems."""
    text = judged_dockerfile(repo_dir, dockerfile, shown, build_args, platform)
    try:
        keyed = keyed_cache_mounts(text, context.repository_cache_id, shown)
    except CacheMountRefused as exc:
        raise ConfigError([str(exc)]) from None
    build_files[name] = text if keyed is None else keyed
    try:  # beneath the checkout too: its directory could be a link swapped in
        ignore = read_beneath(repo_dir, dockerfile.parent / f"{dockerfile.name}.dockerignore", 1 << 20)
    except OSError:
        ignore = None  # none, or none the build may read
    if ignore is not None:
        build_files[f"{name}.dockerignore"] = ignore[: 1 << 20].decode("utf-8", errors="replace")
    return str(build_dir(repo_dir) / name)


def injected_problems(text: str, context: RenderContext, shown: str) -> list[str]:
    """The Dockerfile a framework plugin rendered, judged as a repository's: a template takes values from the
    repository's files (a binary's name, a directory's), and one with a line break in it would add instructions of
    the pull request's choosing. It may start from its base preview's kept dependencies, and its cache mounts must
    be the service's own (`RenderContext.cache_mount`), as its RUN flags must be those a repository's may have."""
    base = context.base_dependencies
    if problems := text_problems(text, shown, allowed=None if base is None else base.image):
        return problems

    def service_id(name: str) -> str:
        if not _SERVICE_CACHE_ID.fullmatch(name):
            raise CacheMountRefused(f"{shown}: a cache mount the service did not key ({name[:40]})")
        return name

    try:
        keyed_cache_mounts(text, service_id, shown)
    except CacheMountRefused as exc:
        return [str(exc)]
    return []


def keyed_cache_mounts(text: str, cache_id: Callable[[str], str], shown: str) -> str | None:
    """`text` with every cache mount's id replaced by `cache_id(its id, or its target)`; None when it has no cache
    mount (the file is used as it is). CacheMountRefused names what cannot be read. Every RUN's flags are read,
    with or without a cache mount: `--mount=type=$KIND` would become one once BuildKit expands it."""
    if (reason := unreadable(text)) is not None:
        raise CacheMountRefused(f"{shown}: {reason}")
    escape = escape_of(directives_of(text))
    lines = lines_of(text)
    out: list[str] = []
    rewritten = 0
    for start, index, logical in instructions(lines, escape):
        if logical is None:  # an empty or comment line
            out.extend(lines[start:index])
            continue
        words = logical.split(None, 1)
        keyword = words[0].upper() if words else ""
        if keyword == "ONBUILD" and ("--mount" in logical.lower() or _CACHE.search(logical)):
            raise CacheMountRefused(f"{shown}: ONBUILD with a mount is not allowed (it would run in another build, "
                                    "outside this repository's caches)")
        if keyword != "RUN":
            out.extend(lines[start:index])
            continue
        line, count = _run_line(words[1] if len(words) > 1 else "", cache_id, shown)
        if count:
            out.append(f"{words[0]} {line}\n")
            rewritten += count
        else:
            out.extend(lines[start:index])
    if not rewritten and not _CACHE.search(joined(text, escape)):
        return None
    result = "".join(out)
    # Every `type=cache` left in the file must be one the rewrite made: anything else is a form it did not read.
    if _instructions_mentioning_cache(result, escape) != rewritten:
        raise CacheMountRefused(f"{shown}: a cache mount the service cannot read (write it as RUN "
                                "--mount=type=cache,target=/path, without quotes or variables)")
    # The copy must read as the file did: the rewrite writes a RUN on one line, and a heredoc's body line that ends in
    # the escape character, joined so to the heredoc's end, would make that heredoc end elsewhere in the copy
    if _keywords(result) != _keywords(text):
        raise CacheMountRefused(f"{shown}: a cache mount beside a heredoc whose body line ends in {escape} cannot be "
                                "keyed (the copy would read otherwise)")
    return result


def _keywords(text: str) -> list[tuple[str, str]] | None:
    """Each instruction's first word and keyword (ONBUILD's instruction's) as BuildKit reads the file (heredoc bodies
    skipped); None when it cannot."""
    try:
        return [(keyword_of(words[:1])[0], keyword_of(words)[0]) for logical in readings(text)[0]
                if (words := logical.split())]
    except Unreadable:
        return None


def _instructions_mentioning_cache(text: str, escape: str) -> int:
    return sum(len(_CACHE.findall(logical)) for _, _, logical in instructions(lines_of(text), escape) if logical)


def _run_line(rest: str, cache_id: Callable[[str], str], shown: str) -> tuple[str, int]:
    """A RUN's flags with its cache mounts keyed, then its command as written; and how many were keyed."""
    flags: list[str] = []
    count = 0
    position = 0
    while True:
        position = _SPACES.match(rest, position).end()  # type: ignore[union-attr]  # \s* always matches
        if not rest.startswith("--", position):
            break
        word = _WORD.match(rest, position).group(0)  # type: ignore[union-attr]  # \S* always matches
        position += len(word)
        flag = _FLAG.fullmatch(word)
        if flag is None or _UNREADABLE.search(word):
            raise CacheMountRefused(f"{shown}: RUN flag {word[:60]} cannot be read (write --name=value, without "
                                    "quotes or variables)")
        name, value = flag[1], flag[2]
        if name == "network" and value in NETWORKS:
            flags.append(word)
        elif name == "mount":
            mount, keyed = _mount(value, cache_id, shown)
            flags.append(f"--mount={mount}")
            count += keyed
        else:
            raise CacheMountRefused(f"{shown}: RUN --{name[:30]} is not allowed (only --mount and --network="
                                    f"{'|'.join(NETWORKS)})")
    return " ".join([*flags, rest[position:].strip()]), count


def _mount(value: str, cache_id: Callable[[str], str], shown: str) -> tuple[str, int]:
    fields = [field for field in value.split(",") if field]
    options: list[tuple[str, str | None]] = []
    for field in fields:
        key, sep, item = field.partition("=")
        options.append((key.strip().lower(), item.strip() if sep else None))
    kind = next((item.lower() for key, item in options if key == "type" and item is not None), "bind")
    if kind != "cache":
        return value, 0
    if sum(key == "id" for key, _ in options) > 1:  # BuildKit takes the last, a reader the first
        raise CacheMountRefused(f"{shown}: a cache mount with two ids ({value[:60]})")
    named = next((item for key, item in options if key == "id" and item), None)
    target = next((item for key, item in options if key in ("target", "dst", "destination") and item), None)
    if target is None:
        raise CacheMountRefused(f"{shown}: a cache mount without a target ({value[:60]})")
    kept = [field for field, (key, _) in zip(fields, options, strict=True) if key != "id"]
    return ",".join([*kept, f"id={cache_id(named or target)}"]), 1
