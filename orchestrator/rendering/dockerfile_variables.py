"""A Dockerfile's variables as BuildKit expands them in an image's name, for dockerfile_policy.py: each variable's
possible values (every ARG default, ENV value and build argument the file's build has), and a source's expansions
with them — over-approximated, never under, within a budget."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Mapping

from orchestrator.rendering.dockerfile_text import keyword_of, shell_words

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
_OTHER_QUOTING = re.compile(r"['\\`]")


def unquoted(word: str) -> str:
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


def variable_values(instructions: list[list[str]], build_args: Mapping[str, str | None], escape: str) -> Values:
    """Each variable's possible values, each with how many times the file gives it: every ARG default and ENV value
    (its words split and unquoted with the file's escape character, as BuildKit does; one with a variable as
    written, quotes removed only where `unquoted` can), the build argument, and unset.
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
            if "$" in value:  # its variables as BuildKit reads them: in the value as written (`unquoted`)
                value = unquoted(as_written.partition("=")[2])
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


def expansions(source: str, values: Values, budget: list[int],
                platform: Mapping[str, frozenset[str]] | None = None) -> set[str]:
    """`source` with its variables replaced by each combination of their possible values (a value naming another
    variable expanded in turn). ValueError for a form this cannot read, for BuildKit's own arguments (_BUILTIN_ARG:
    it sets them, TARGETSTAGE to a stage's name) met at any depth, or for more work than `budget` holds
    (shared by the file's sources, counted in combinations and in characters)."""
    return _expanded(source, source, values, budget, Counter(), platform or {})


def _expanded(text: str, source: str, values: Values, budget: list[int], used: Counter[tuple[str, str]],
              platform: Mapping[str, frozenset[str]]) -> set[str]:
    """`expansions` of `text`, within a value of `source`'s chain. A value is expanded at the instruction that gives
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
