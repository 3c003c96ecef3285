"""What a Dockerfile may not do, judged on its instructions as BuildKit reads them (dockerfile_text.py: continuations
joined, comment lines inside them skipped) with its variables expanded as BuildKit would expand them: name the
service's namespace of built images (po-build/) or an image by its id (which Docker resolves against every local
image, another preview's built one too) as a base or a source. A repository's Dockerfile, its dockerfile_inline and
the service's own injected one are all judged so (the injected one takes values from the repository's files). Cache
mounts are made the repository's own by dockerfile_cache.py."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

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
    shell_words,
)

MAX_DOCKERFILE_BYTES = 1024 * 1024  # a Dockerfile or dockerfile_inline larger than this is refused, not cut


# An image id or a prefix of one, which Docker resolves against every local image: a built image of another preview
# too, whatever its name. Refused as `image:`, `FROM`, `COPY --from` and a mount's `from=`.
IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{1,64}", re.IGNORECASE)
# `$NAME`, `${NAME}`, `${NAME:-word}`, `${NAME-word}`, `${NAME:+word}`, `${NAME+word}`: what is expanded here; any
# other `$` left in a source (`${NAME#x}`, an escaped one) is a form the policy cannot read, and is refused
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_]\w*)(?:(:?[-+])([^{}$]*))?\}|([A-Za-z_]\w*))")
# BuildKit's own arguments, which it sets whatever the file declares: TARGETPLATFORM, TARGETSTAGE, BUILDOS and the
# like (TARGET or BUILD and capitals: a file's `# syntax=` may name a frontend with more), BUILDKIT_*, and
# SOURCE_DATE_EPOCH (dockerfile 1.24 puts a timestamp, digits, for a stage named in it). `BUILD_FROM` is a file's own.
_BUILTIN_ARG = re.compile(r"(?:TARGET|BUILD)[A-Z]*|BUILDKIT_\w*|SOURCE_DATE_EPOCH")
# The platform arguments' values when the build's platform is the engine's own (a compose file that sets none:
# DOCKER_DEFAULT_PLATFORM is set empty for compose, common/host_env.py): every Linux platform Docker runs on natively.
# A file's `FROM build-${TARGETARCH}` is judged with each; where the compose file chooses the platform they are
# refused as BuildKit's other arguments are.
_ARCHES = ("amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "mips64le", "mips64", "loong64")
_VARIANTS = ("v2", "v3", "v4", "v5", "v6", "v7", "v8")
_PLATFORMS = frozenset(f"linux/{arch}{suffix}" for arch in _ARCHES for suffix in ("", *(f"/{v}" for v in _VARIANTS)))
NATIVE_PLATFORM: Mapping[str, frozenset[str]] = {
    **{f"{side}OS": frozenset({"linux"}) for side in ("TARGET", "BUILD")},
    **{f"{side}ARCH": frozenset(_ARCHES) for side in ("TARGET", "BUILD")},
    **{f"{side}VARIANT": frozenset(("", *_VARIANTS)) for side in ("TARGET", "BUILD")},
    **{f"{side}PLATFORM": _PLATFORMS for side in ("TARGET", "BUILD")},
}
MAX_EXPANSIONS = 1024  # the combinations (and KiB) of the file's sources' values judged; more is refused
MAX_CHAIN = 64  # values naming values, in one chain: more is refused (each is a Python call)
Values = dict[str, Counter[str]]  # a variable's possible values, each with how many times the file gives it
# What a base or a source may be written with: a reference's characters and the variable forms above. BuildKit's
# lexer removes quotes and escapes (`po-"build"/…`, `po-b\\uild/…`): a name written so is refused, unless its only
# quoting is balanced double quotes (`_unquoted`, which removes them as the lexer does).
_PLAIN_SOURCE = re.compile(r"[A-Za-z0-9._:/@+${}-]*")
_OTHER_QUOTING = re.compile(r"['\\`]")


def judged_dockerfile(path: Path, shown: str, build_args: Mapping[str, str | None] | None = None,
                      platform: Mapping[str, frozenset[str]] | None = None) -> str:
    """A repository's Dockerfile at `path`, read once and judged (`text_problems`, with what its build passes as
    `build_args`, and `platform`): the text to build from. ConfigError with the problems."""
    try:
        data = path.read_bytes()
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
    values = _values(instructions, build_args, escape)
    for written, excused in _sources(instructions):
        source = _unquoted(written)
        if not _PLAIN_SOURCE.fullmatch(source):
            return (f"{shown}: an image may be named only with a reference's characters and $NAME, ${{NAME}} or "
                    f"${{NAME:-default}} ({source[:60]}: BuildKit would remove quotes and escapes the policy does not)")
        try:
            expanded = _expansions(source, values, budget, platform)
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


def _unquoted(word: str) -> str:
    """A word written with double quotes (`FROM "$BASE"`, `alpine:"${TAG}"`, `ARG B="$A"`) as BuildKit's lexer
    leaves it: the quotes removed, when they are balanced, the word has no escape character (either one) and no
    single quote, and they sit between its variables, never in one nor ending one's name — BuildKit reads a word's
    variables and its quotes in one pass, so `$P"d/x"` is $P then d/x, which the quotes' removal would join into
    $Pd. Any other word is left as written: its quotes then refuse it wherever it names an image."""
    if '"' not in word or word.count('"') % 2 or _OTHER_QUOTING.search(word):
        return word
    plain = word.replace('"', "")
    written = [match[0] for match in _VARIABLE.finditer(word)]
    if any('"' in variable for variable in written) or written != [match[0] for match in _VARIABLE.finditer(plain)]:
        return word
    return plain


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


def _values(instructions: list[list[str]], build_args: Mapping[str, str | None], escape: str) -> Values:
    """Each variable's possible values, each with how many times the file gives it: every ARG default and ENV value
    (its words split and unquoted with the file's escape character, as BuildKit does; one with a variable as
    written, quotes removed only where `_unquoted` can), the build argument, and unset.
    Over-approximated on purpose (any stage's, any order): a value judged needlessly costs nothing."""
    values: Values = {}
    for keyword, rest in map(keyword_of, instructions):
        if keyword not in ("ARG", "ENV"):
            continue
        rest = rest[_flag_count(rest):]  # BuildKit takes them off (ARG ignores them; dockerfile_doubts reads them)
        pairs, written = (shell_words(" ".join(rest), escape, keep_quotes=keep) for keep in (False, True))
        if keyword == "ENV" and pairs and "=" not in pairs[0]:  # the old form: `ENV NAME the value`
            pairs, written = ([f"{words[0]}={' '.join(words[1:])}"] for words in (pairs, written))
        for pair, as_written in zip(pairs, written, strict=True):
            name, _, value = pair.partition("=")
            if "$" in value:  # its variables as BuildKit reads them: in the value as written (`_unquoted`)
                value = _unquoted(as_written.partition("=")[2])
            values.setdefault(name, Counter({"": 1}))[value] += 1
    for name, value in build_args.items():
        values.setdefault(str(name), Counter({"": 1}))["" if value is None else str(value)] += 1
    return values


def _flag_count(words: list[str]) -> int:
    """How many of `words` BuildKit takes off an instruction as its flags: those starting `--`, up to and with a bare
    `--`, which ends them."""
    for index, word in enumerate(words):
        if word == "--":
            return index + 1
        if not word.startswith("--"):
            return index
    return len(words)


def _expansions(source: str, values: Values, budget: list[int],
                platform: Mapping[str, frozenset[str]] | None = None) -> set[str]:
    """`source` with its variables replaced by each combination of their possible values (a value naming another
    variable expanded in turn). ValueError for a form this cannot read, for BuildKit's own arguments (_BUILTIN_ARG:
    it sets them, TARGETSTAGE to a stage's name) met at any depth, or for more work than `budget` holds
    (shared by the file's sources, counted in combinations and in characters)."""
    return _expanded(source, source, values, budget, Counter(), platform or {})


def _expanded(text: str, source: str, values: Values, budget: list[int], used: Counter[tuple[str, str]],
              platform: Mapping[str, frozenset[str]]) -> set[str]:
    """`_expansions` of `text`, within a value of `source`'s chain. A value is expanded at the instruction that gives
    it, from the values before it: so in one chain of values naming values, each is met at most as often as the file
    gives it (`used`), which ends a self-reference (`ENV V=${V}`, `ENV PATH=/x:$PATH`) where endless expansion had
    spent the budget."""
    found = list(_VARIABLE.finditer(text))
    if not found:
        if "$" in text:
            raise ValueError(f"a variable the service cannot read names an image ({source[:60]}; write $NAME, "
                             "${NAME} or ${NAME:-default})")
        return {text}
    if sum(used.values()) >= MAX_CHAIN:
        raise ValueError(f"an image named through a chain of more than {MAX_CHAIN} variables ({source[:60]})")
    choices = []
    for match in found:
        name = match[1] or match[4]
        operator, word = match[2], match[3] or ""
        possible: set[str] = set()
        if name in platform:  # BuildKit's value, and the file's own too (a default may stand in for it)
            possible |= platform[name]
        elif _BUILTIN_ARG.fullmatch(name.upper()):
            raise ValueError(f"an image named through {name} is not allowed (BuildKit gives its own value to "
                             "TARGETSTAGE, a stage's name, and the like; to TARGETARCH and the platform's others "
                             "where the compose file chooses the platform)")
        for value, given in values.get(name, Counter({"": 1})).items():
            if "$" not in value:
                possible.add(value)
            elif used[name, value] < given:
                possible |= _expanded(value, source, values, budget, used + Counter({(name, value): 1}), platform)
        if operator and operator.endswith("-"):
            possible.add(word)
        elif operator:  # `+`: the word when set, else nothing
            possible = {word, ""}
        choices.append(sorted(possible))
    done: set[str] = set()
    for combination in itertools.product(*choices):
        parts, position = [], 0
        for match, value in zip(found, combination, strict=True):
            parts += [text[position:match.start()], value]
            position = match.end()
        result = "".join([*parts, text[position:]])
        budget[0] -= 1 + len(result) // 1024
        if budget[0] < 0:
            raise ValueError(f"an image named through variables with too many values to judge ({source[:60]})")
        done.add(result)
    return done
