"""The Dockerfile policy as BuildKit reads a Dockerfile (rendering/dockerfile_policy.py): no image of another preview
as a base or a source — by its id or by the service's po-build/ names — however it is written: through an ARG, an
ENV or a build argument, across a line continuation BuildKit joins, in a compose file's dockerfile_inline, or in the
service's own injected Dockerfile through a value a template takes from the repository's files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from orchestrator.common.host_env import HostEnv
from orchestrator.plugin_api.preview_config import ConfigError
from orchestrator.plugin_api.types import BaseDependencies
from orchestrator.rendering.checkout_config import load_checkout_config
from orchestrator.rendering.compose_file import INJECTED_DOCKERFILE, make_context, render_deployment
from orchestrator.rendering.dockerfile_cache import (
    CacheMountRefused,
    injected_problems,
    keyed_cache_mounts,
    keyed_dockerfile,
)
from orchestrator.rendering.dockerfile_policy import names_built_images, text_problems
from orchestrator.rendering.plugin_host import PluginHost, build_plugin_host
from tests.support.repos import config_for, make_repo

ID = "may not name an image by its id"
BUILT = "may not name po-build/"
PLAIN = "may be named only with a reference's characters"
FLAG = "a flag with quotes, escapes or characters other than ASCII"
EXPANDED_HEREDOC = "with ${...} and two < is not allowed"


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return build_plugin_host(load_entry_points=False)


@pytest.mark.parametrize(("dockerfile", "args", "problem"), [
    ("ARG I=3f2a9c1d\nFROM $I\n", {}, ID),
    ("ARG I=3f2a9c1d\nFROM python:3.12\nCOPY --from=${I} /etc /loot\n", {}, ID),
    ('ARG I="sha256:3f2a9c1d"\nFROM ${I}\n', {}, ID),
    ("ARG I\nFROM $I\n", {"I": "3f2a9c1d"}, ID),  # a compose file's build argument
    ("FROM ${I:-3f2a9c1d}\n", {}, ID),
    ("ARG A=3f2a\nARG B=${A}9c1d\nFROM $B\n", {}, ID),  # one variable naming another
    ("FROM python:3.12\nENV S=beef\nCOPY --from=$S /a /a\n", {}, ID),
    ("FROM 3f2a\\\n9c1d\n", {}, ID),  # a continuation BuildKit joins
    ("FROM 3f2a\\ \n# a comment inside it\n\n9c1d\n", {}, ID),
    ("FROM python:3.12\nONBUILD COPY --from=3f2a /a /a\n", {}, ID),
    ("FROM python:3.12\nCOPY --from=\"3f2a\" /a /a\n", {}, FLAG),
    ("ARG I=po-\nFROM ${I}build/0123-app\n", {}, BUILT),
    ("ARG I\nFROM python:3.12\nCOPY --from=$I /a /a\n", {"I": "po-build/0123-app"}, BUILT),
    ("FROM po-\\ \nbuild/0123-app\n", {}, BUILT),
    ("FROM po-\\\n# comment\nbuild/0123-app\n", {}, BUILT),
    ("FROM po-\\\n\nbuild/0123-app\n", {}, BUILT),
    ("FROM po-\\\r\nbuild/0123-app\r\n", {}, BUILT),
    ("FROM ${I#x}\n", {}, PLAIN),
    # quotes and escapes BuildKit's lexer removes
    ('FROM po-"build"/0123-app\n', {}, BUILT),  # the quotes removed as BuildKit's lexer removes them
    ("FROM po-build''/0123-app\n", {}, PLAIN),
    ("FROM python:3.12\nCOPY --from=po-bu\\ild/0123-app / /\n", {}, FLAG),
    ('FROM ${X:-po-"build"/0123-app}\n', {}, PLAIN),  # a quote inside a variable's form
    ('FROM 3f2a"9c1b7d4e"\n', {}, ID),
    # another frontend, wherever BuildKit looks for one
    ("# syntax=evil/fe x\nFROM b\n", {}, "is not allowed (only BuildKit's own"),
    ("#!x\n# syntax=evil/fe\nFROM b\n", {}, "a first line starting #!"),
    ("// syntax=evil/fe\nFROM b\n", {}, "a syntax line outside"),
    ('{"syntax": "evil/fe"}', {}, "written as JSON"),
    # lines BuildKit's versions, or BuildKit and this reader, would join otherwise
    ("FROM python:3.12\nRUN echo \\\\\nCOPY --from=3f2a9c1b7d4e / /\n", {}, "ends in \\\\"),
    ("FROM python:3.12\nRUN echo x\\\r \nCOPY --from=3f2a / /\n", {}, "control characters"),
    ("FROM python:3.12\nRUN <<'EOF\\'\nx\nEOF\\\nCOPY --from=3f2a9c1b7d4e / /\n", {},
     "a heredoc the service cannot read"),
    ("FROM python:3.12\nRUN <<EOF\necho \\\nEOF\nCOPY --from=3f2a9c1b7d4e / /\n", {}, ID),
    ("FROM python:3.12\nRUN <<EOF\nFROM 3f2a9c1b7d4e\nEOF\n", {}, ID),  # a builder without heredocs reads it
    ("# foo=bar\n# escape=`\nFROM b\n", {}, "an escape directive"),
    ("# check=skip=all\n# escape=`\nFROM b\n", {}, "an escape directive"),
    ("  # escape=`\nFROM python:3.12\nCOPY --from=3f2a`\n9c1b / /\n", {}, ID),  # joined: 3f2a9c1b
    ("\ufeffFROM 3f2a9c1b7d4e\n", {}, ID),
    ("FROM python:3.12\n\ufeffFROM 3f2a\n", {}, "control characters"),
    # what BuildKit adds to a bare name before it looks it up
    ("FROM docker.io/library/3f2a9c1b7d4e\n", {}, ID),
    ("FROM 3f2a9c1b7d4e:latest\n", {}, ID),
    ("FROM index.docker.io/library/3f2a\n", {}, ID),
    # a FROM names only the stages before it, and never one by its index
    ("FROM abc123\nFROM alpine AS abc123\n", {}, ID),
    ("FROM alpine\nFROM 0\n", {}, ID),
    # flags as BuildKit reads them: byte by byte, quotes and escapes removed
    ('FROM python:3.12\nCOPY --"from"=3f2a9c1b / /loot\n', {}, FLAG),
    ('FROM python:3.12\nCOPY --exclude="a b" --from=3f2a9c1b / /loot\n', {}, FLAG),
    ("FROM python:3.12\nCOPY --exclude=x\u00e0--from=3f2a9c1b / /loot\n", {}, FLAG),
    ("FROM python:3.12\nRUN --mount=target=/x\u00e0--mount=from=3f2a9c1b,target=/y cat /y/x\n", {}, FLAG),
    ("FROM python:3.12\nONBU\u0130LD RUN true\nCOPY --from=3f2a9c1b / /\n", {}, "a character Go lower-cases to ASCII"),
    # heredocs as BuildKit finds them: shell words, quotes kept
    ('FROM alpine\nRUN <<EOF\nFROM alpine AS 3f2a9c1b\nEOF\nRUN echo " <<END "\nCOPY --from=3f2a9c1b / /loot\n', {},
     ID),
    ("FROM alpine\nRUN <<EOF\necho never ends\n", {}, "a heredoc that never ends"),
    # ARG words split with the file's escape character
    ("# escape=`\nARG I=x\\ J=3f2a9c1b\nFROM $J\n", {}, ID),
    # BuildKit's own arguments: TARGETSTAGE is the target stage's name, which a FROM then takes for an image
    ("FROM ${TARGETSTAGE} AS deadbeef\n", {}, "an image named through TARGETSTAGE"),
    ("ARG TARGETVARIANT\nFROM python:3.12\nCOPY --from=$TARGETVARIANT / /\n", {}, "through TARGETVARIANT"),
    # a heredoc only a newer frontend finds (it expands `${X:-word}` first) ends at a line this reader joins, or
    # holds a stage this reader counts: refused wherever `${` and two `<` meet in a RUN, COPY or ADD
    ("# syntax=docker/dockerfile:1.4\nARG P=po-buil\nARG S=${P}d/victim:latest\nFROM alpine AS decoy\n"
     "RUN ${X:-\\ <<A}\\\\ true\nA}\\\nFROM ${S}\nRUN echo pwned\n", {}, EXPANDED_HEREDOC),
    ("# syntax=docker/dockerfile:1.4\nARG P=po-buil\nARG S=${P}d/victim:latest\nFROM alpine AS decoy\n"
     "RUN ${X:-\\ <<A}\\\\ true\nA}\\\nFROM ${S} \\\n  AS loot\nRUN echo pwned\n", {}, EXPANDED_HEREDOC),
    ("# syntax=docker/dockerfile:1.4\nFROM alpine AS base\nRUN ${X:-\\ <<A} true\nFROM alpine AS 3f2a9c1b\nA}\n"
     "FROM alpine\nCOPY --from=3f2a9c1b / /loot\n", {}, EXPANDED_HEREDOC),
    ("FROM alpine\nONBUILD RUN ${X:-\\ \\<\\<A} true\n", {}, EXPANDED_HEREDOC),  # escaped, in a trigger
    # ONBUILD's instruction has its flags read as any instruction's (a later stage's FROM runs the trigger)
    ('# syntax=docker/dockerfile:1.12\nFROM alpine AS s1\nONBUILD COPY --"from"=po-bu"ild"/0123-app / /loot\n'
     "FROM s1\nRUN ls /loot\n", {}, FLAG),
    ('FROM alpine AS s1\nONBUILD COPY --"from"=3f2a9c1b / /loot\nFROM s1\n', {}, FLAG),
    ('FROM alpine AS s1\nONBUILD COPY --chown="a b" --from=3f2a9c1b / /loot\nFROM s1\n', {}, FLAG),
    # ONBUILD's own flags, which BuildKit drops (`ONBUILD -- RUN <<A` is a RUN with a heredoc to it, none here)
    ("FROM alpine AS base\nONBUILD -- RUN <<A\nFROM alpine AS deadbeef\nA\nFROM alpine\nCOPY --from=deadbeef / /loot\n",
     {}, "ONBUILD followed by anything but"),
    ("ARG S=po-buil\nFROM alpine AS base\nONBUILD -- RUN <<'A\\'\nA\\\nFROM\\\n ${S}d/0123abcd-web:latest\nRUN true\n",
     {}, "ONBUILD followed by anything but"),
    ("FROM alpine AS base\nONBUILD -- RUN <<'A\\'\nA\\\nRUN\\\n --mount=type=ca\"che\",id=npm,target=/root/.npm ls\n",
     {}, "ONBUILD followed by anything but"),
    # a heredoc's name that is not plain, in the reading without heredocs too; a keyword glued to the escape
    ("FROM alpine\nRUN true \\\n <<'A\\'\nA\\\nFROM 3f2a9c1b\n", {}, "a heredoc the service cannot read"),
    ("FROM\\\n 3f2a9c1b\n", {}, "keyword followed at once by the escape character"),
    # the JSON form and then <<: dockerfile 1.3 to 1.8 ignore what follows the array, later versions do not
    ("# syntax=docker/dockerfile:1.4\nARG S=po-buil\nFROM alpine\nRUN [\"true\"] <<A\nRUN <<'B\\'\nA\nB\\\nFROM\\\n"
     " ${S}d/0123abcd-web:latest\n", {}, "in JSON form followed by <<"),
    ("# syntax=docker/dockerfile:1.4\nFROM alpine\nRUN [\"true\"] <<true\nRUN <<B\nFROM alpine AS deadbeef\nB\n"
     "FROM alpine\nCOPY --from=deadbeef / /loot\nRUN <<C\ntrue\nC\n", {}, "in JSON form followed by <<"),
    # dockerfile 1.24 puts a timestamp (digits: an id's prefix) in SOURCE_DATE_EPOCH for a stage named in it
    ("ARG SOURCE_DATE_EPOCH=ts\nFROM scratch AS ts\nADD https://example.test/x /e\nFROM ${SOURCE_DATE_EPOCH}\n", {},
     "through SOURCE_DATE_EPOCH"),
    # a heredoc only this reader sees puts it out of step: a `FROM alpine AS 3f2a9c1d` in a heredoc's body looks
    # like a stage to it and to no BuildKit. A stage named like an id excuses no id, and each such heredoc is refused.
    ("FROM alpine AS deadbeef\nFROM python:3.12\nCOPY --from=deadbeef /a /a\n", {}, "rename it"),
    # a stage's name, however BuildKit would normalise a reference that looks like it, excuses nothing
    ("FROM alpine AS library/3f2a9c1d\nFROM alpine\nCOPY --from=library/3f2a9c1d / /loot\n", {}, ID),
    ("FROM alpine AS 3f2a9c1d:latest\nFROM alpine\nRUN --mount=from=3f2a9c1d:latest,target=/l ls\n", {}, ID),
    ("# syntax=docker/dockerfile:1.4\nFROM alpine AS base\nRUN true # <<X '\nCOPY <<EOF /junk\nX\n"
     "FROM alpine AS 3f2a9c1d\nEOF\nFROM base\nCOPY --from=3f2a9c1d / /\n", {}, "a quote that never closes"),
    ("# syntax=docker/dockerfile:1.4\nFROM alpine AS base\nCOPY \u0663<<X /tmp/\nCOPY <<EOF /junk\nX\n"
     "FROM alpine AS deadbeef\nEOF\nFROM deadbeef\nRUN true\n", {}, ID),  # an Arabic-Indic digit: no \d to Go
    ("# syntax=docker/dockerfile:1\nFROM alpine AS base\nRUN true # x<< <<X\nRUN <<EOF\nX\nFROM alpine AS deadbeef\n"
     "EOF\nFROM base\nRUN --mount=from=deadbeef,target=/loot ls /loot\n", {}, "a << that ends a word"),
    # a JSON object BuildKit (v0.11 on) reads a frontend from, nested deeper than Python's reader goes
    ('{"syntax": "evil/frontend", "x": ' + "[" * 5000 + "]" * 5000 + "}", {}, "written as JSON"),
    ("FROM alpine\nRUN exit 0; ${X:-\\ <<A}\\\\ x\nA}\\\nRUN --mount=type=${K:-cache},target=/root/.npm ls\n", {},
     "a --mount with a variable"),
    # BuildKit's own arguments reached through an ARG's default
    ("ARG T=${TARGETSTAGE}/victim:latest\nFROM ${T} AS loot\nFROM alpine AS po-build\nCOPY --from=loot / /\n", {},
     "through TARGETSTAGE"),
    # a mount names a stage by its name only
    ("FROM alpine\nFROM alpine\nRUN --mount=from=1,target=/x true\n", {}, ID),
    # a value naming its own variable names the values before it: every one of them judged, however many
    ("ARG A=3f\nFROM python:3.12\nENV A=${A}2a\nENV A=${A}9c\nCOPY --from=$A / /\n", {}, ID),
    ("ARG A=3f\nFROM python:3.12\nENV A=${A}2a\nENV A=${A}2a\nCOPY --from=$A / /\n", {}, ID),  # 3f2a2a
    ("ARG A=3f\nFROM python:3.12\nENV A=$A\nENV B=${A}2a\nCOPY --from=$B / /\n", {}, ID),
    ("".join(f"ARG A{i}=${{A{i - 1}}}\n" for i in range(1, 80)) + "FROM $A79\n", {}, "a chain of more than"),
    # balanced double quotes are removed as BuildKit's lexer removes them, and what is left is judged
    ('FROM "3f2a9c1d"\n', {}, ID),
    ('ARG I=3f2a\nFROM "${I}"9c1d\n', {}, ID),
    ('FROM "po-build/0123-app"\n', {}, BUILT),
    # BuildKit reads a word's variables and quotes in one pass: a quote ends a name, so their removal may not join
    # text to one (`$P"d/…"` is $P then d/…, not $Pd), in a base as in an ARG's value
    ('ARG P=po-buil\nFROM $P"d/0123abcd-app"\n', {}, PLAIN),
    ('ARG P=po-buil\nFROM "$P"d/0123abcd-app\n', {}, PLAIN),
    ('ARG X=po-buil\nFROM ${X:-a"}"b}d/0123abcd-app\n', {}, PLAIN),
    ('ARG H=3f2a\nFROM $H"b9"\n', {}, PLAIN),
    ('ARG P=po-buil\nARG Y=$P"d/0123abcd-app"\nFROM $Y\n', {}, "characters of no reference"),
    ('ARG P=po-buil\nARG Y=$P\\d/0123abcd-app\nFROM $Y\n', {}, "characters of no reference"),
    ("ARG P=po-buil\nARG Y=$P'd/0123abcd-app'\nFROM $Y\n", {}, "characters of no reference"),
    # every instruction's flags are read as BuildKit's flag reader would: ARG ignores its own, which hid the ARG
    ("ARG --x='\\'' P=0123abcd\nFROM $P\n", {}, FLAG),  # its reader lets the escape work in single quotes
    ("ARG --x\u00e0P=0123abcd\nFROM $P\n", {}, FLAG),  # and reads bytes: \xa0 of \u00e0 is a space to it
    ('# escape=`\nARG --x=\\" P=0123abcd\nFROM $P\n', {}, FLAG),  # dockerfile 1.4's escape there is always \\
    ("ARG -- P=0123abcd\nFROM $P\n", {}, ID),  # a bare -- ends the flags
    ("ARG --x=1 \\\n --y='\\'' P=0123abcd\nFROM $P\n", {}, FLAG),  # on a continuation line
    ("ARG --x=1 P=0123abcd\nFROM $P\n", {}, ID),
    # any other quoting is refused as written: an odd quote, a single quote, an escape inside
    ('FROM "3f2a\n', {}, PLAIN),
    ("FROM '3f2a'\n", {}, PLAIN),
    ('FROM "3f\\2a"\n', {}, PLAIN),
    # a flag that ends a line read alone with the escape character is judged with what the line joins
    ("FROM alpine\nRUN --mount=type=bind,from=3f2a9c1d,target=/x\\\n  true\n", {}, ID),
    ('FROM alpine\nRUN --mount=type=bind,from="x",target=/x\\\n  true\n', {}, FLAG),
])
def test_an_image_of_another_preview_cannot_be_named_however_it_is_written(dockerfile: str, args: dict[str, str],
                                                                          problem: str) -> None:
    [found] = text_problems(dockerfile, "Dockerfile", args)
    assert problem in found


@pytest.mark.parametrize("dockerfile", [
    "ARG NODE_VERSION=20\nFROM node:${NODE_VERSION}-alpine AS build\nFROM debian:12\nCOPY --from=build /a /a\n",
    "ARG BASE=python:3.12\nFROM $BASE\nARG STAGE=0\nCOPY --from=${STAGE} /a /a\n",
    "FROM --platform=$BUILDPLATFORM golang:1.22 AS builder\nFROM scratch\nCOPY --from=builder /a /a\n",
    "FROM python:3.12\nRUN echo from=3f2a --from=3f2a\n",  # words of a command, not flags
    "FROM python:3.12\nRUN python3 - <<EOF\nfrom abc import ABC\nprint(ABC)\nEOF\n",  # a heredoc's body
    "FROM python:3.12\nCOPY <<-EOF /etc/x\n\tsome text\n\tEOF\nRUN true\n",
    "# syntax=docker/dockerfile:1.7\n# escape=\\\nFROM python:3.12 AS deps\nCOPY --from=deps /a /a\n",
    "FROM python:3.12\nRUN echo $((1<<3)) && python -c 'print(1<<3)'\nRUN bash -c 'cat <<< hi'\n",
    "FROM python:3.12\nRUN cat > /etc/x <<'EOF'\nline\nEOF\nLABEL maintainer=\"Jos\u00e9\"\n",
    "FROM python:3.12\nLABEL description=\"An application \\\n  f\u00fcr Kunden\"\n",  # a line that starts non-ASCII
    # a continuation line read alone is no instruction: its `--` words are a command's, not flags
    'FROM python:3.12\nRUN pip install \\\n    --no-cache-dir --extra-index-url="https://example.test/whl/cpu" torch\n',
    "FROM debian:12\nRUN ./configure \\\n    --prefix=/etc/nginx --with-cc-opt='-O2 -g' \\\n    --enable-shared\\\n"
    " && make\n",
    'FROM debian:12\nRUN <<EOF\ncurl --fail --header="Authorization: x" https://example.test\nEOF\n',
    # a file's own arguments that merely start BUILD (Home Assistant add-ons' BUILD_FROM)
    "ARG BUILD_FROM=python:3.12\nFROM $BUILD_FROM\nARG BUILDER_IMAGE=golang:1.22\nFROM ${BUILDER_IMAGE} AS b\n",
    # one < beside ${...}: no heredoc however a frontend expands it
    "FROM postgres:16\nARG DB=app\nRUN psql -d ${DB} < /init.sql\nRUN python${PY} -c 'print(1 < 2)'\n",
    # a variable given its own value again (denoland/deno_docker: the budget ran out on it)
    "ARG DENO_VERSION=2.1.4\nARG BIN_IMAGE=denoland/deno:bin-${DENO_VERSION}\nFROM ${BIN_IMAGE} AS bin\n"
    "FROM alpine:3.20\nARG DENO_VERSION\nENV DENO_VERSION=${DENO_VERSION}\nENV PATH=/deno/bin:$PATH\n"
    "COPY --from=bin /deno /bin/deno\n",
    # a base in double quotes (shellcheck's habit: AdGuardHome, the Jenkins images)
    'ARG BASE_IMAGE=alpine:3.20\nFROM "$BASE_IMAGE" AS deps\nARG TAG=3.20\nFROM alpine:"${TAG}"\n'
    'ARG IMAGE="$BASE_IMAGE"\nFROM $IMAGE\n',
    "FROM alpine\nHEALTHCHECK --interval=30s --timeout=3s --start-period=5s CMD wget -qO- localhost || exit 1\n",
    'FROM alpine\nHEALTHCHECK --interval="30s" CMD true\n',  # flags that feed nothing judged are not read
    # a mount's flag glued to the line's continuation (novu)
    "FROM node:20\nRUN --mount=type=cache,id=pnpm-store,target=/root/.pnpm-store\\\n  pnpm install\n",
])
def test_what_real_dockerfiles_write_is_allowed(dockerfile: str) -> None:
    assert text_problems(dockerfile, "Dockerfile", {"STAGE": "0"}) == []


def test_a_text_a_json_reader_would_recurse_on_is_an_answer_not_an_error() -> None:
    assert text_problems("[" * 100000, "Dockerfile") == []  # no instruction BuildKit knows: its build fails
    assert keyed_cache_mounts("[" * 100000, str, "Dockerfile") is None


@pytest.mark.parametrize("dockerfile", [
    "FROM alpine\n" + "\n" * 1_000_000,  # `^\\s*#` over a run of empty lines backtracked for hours
    "#a=b" + " " * 200_000 + "c\nFROM alpine\n",  # a directive's lazy value before spaces and a word
    "FROM alpine\nRUN " + "--mount=" * 100_000 + "\n",  # `--mount=\\S*\\$` over repeated mounts
    "".join(f"FROM alpine AS s{i}\n" for i in range(10_000)) + "COPY --from=s1 / /\n" * 10_000,  # a set per copy
    "FROM a\n" + "ONBUILD " * 130_000 + "RUN true\n",  # ONBUILD's instruction found by a walk, not by slices
])
def test_no_dockerfile_holds_the_service_s_threads(dockerfile: str) -> None:
    """The check runs in the service's process: a form that makes it backtrack quadratically (it held the GIL for
    hours, every flow and request waiting) is judged in a moment. A generous bound: each took minutes or more."""
    began = time.monotonic()
    text_problems(dockerfile, "Dockerfile")
    keyed_cache_mounts(dockerfile, str, "Dockerfile")
    assert time.monotonic() - began < 20


def test_many_sources_of_few_values_each_share_one_budget() -> None:
    text = "ARG A=x B=y\n" + "FROM ${A}${B}${A}${B}${A}${B}${A}${B}\n" * 1000
    [problem] = text_problems(text, "Dockerfile")
    assert "too many values to judge" in problem


def test_chained_variables_cannot_make_the_policy_work_for_hours() -> None:
    # four variables of 24 values each, each naming the one before: 24 ** 4 images to judge, refused at once
    arguments = "".join(f"ARG {name}={value}{i}\n" for name, value in (("A", "x"), ("B", "${A}"), ("C", "${B}"),
                                                                       ("D", "${C}")) for i in range(24))
    chained = "FROM ${D}\n"
    [problem] = text_problems(arguments + chained, "Dockerfile")
    assert "too many values to judge" in problem


def test_names_built_images_reads_continuations_as_buildkit_joins_them() -> None:
    assert not names_built_images("FROM b\nRUN <<EOF\nnever ends\n")  # an answer, not an error: refused elsewhere
    assert names_built_images("FROM po-\\ \n#c\n\nbuild/x\n")
    assert names_built_images("# escape=`\nFROM po-`\nbuild/x\n")
    assert not names_built_images("FROM python:3.12\nRUN echo po-\\\n  done\n")


def test_a_cache_mount_is_keyed_only_where_the_copy_reads_as_the_file(host: PluginHost) -> None:
    """BuildKit takes a cache mount's last id; the keyed copy writes a RUN on one line, which must not move where a
    heredoc ends (a body line ending in the escape character is joined to the heredoc's end by the rewrite)."""
    with pytest.raises(CacheMountRefused, match="two ids"):
        keyed_cache_mounts("FROM alpine\nRUN --mount=type=cache,target=/x,id=a,id=b true\n", str, "Dockerfile")
    context = make_context("acme", "shop", 1, 8001, 9001, b"k", build_cache=True)
    own = context.cache_mount("go-build", "/root/.cache").strip()
    [problem] = injected_problems(f"FROM alpine\nRUN {own},id=victim true\n", context, "Dockerfile")
    assert "two ids" in problem
    moved = ("FROM alpine\nRUN --mount=type=cache,target=/x,id=one <<A\nRUN --mount=type=cache,target=/y,id=two \\\n"
             "A\nRUN true\nA\n")
    with pytest.raises(CacheMountRefused, match="cannot be keyed"):
        keyed_cache_mounts(moved, str, "Dockerfile")
    kept = "FROM alpine\nRUN --mount=type=cache,target=/x <<A\napt-get install -y \\\n  curl\nA\nRUN true\n"
    assert "RUN true" in (keyed_cache_mounts(kept, lambda name: "k", "Dockerfile") or "")
    # a lone escape character as the last line is an instruction of no words: keyed, not an internal error
    trailing = "FROM alpine\nRUN --mount=type=cache,target=/x true\n\\\n"
    assert "id=k" in (keyed_cache_mounts(trailing, lambda name: "k", "Dockerfile") or "")


def test_a_dockerfile_that_is_a_directory_is_refused(host: PluginHost, tmp_path: Path) -> None:
    """BuildKit, failing to read `Dockerfile`, reads `dockerfile` beside it: a directory of that name would have hidden
    the file the build uses from every check."""
    repo = make_repo(tmp_path / "r", config_for("go"), files={"Dockerfile/x": "", "dockerfile": "FROM 3f2a9c1d\n"})
    (repo / "compose.preview.yml").write_text(yaml.safe_dump({"services": {"app": {"build": {"context": str(repo)}}}}))
    context = make_context("acme", "shop", 1, 8001, 9001, b"k")
    with pytest.raises(ConfigError) as refused:
        render_deployment(host, repo, load_checkout_config(host, repo), context,
                          normalize=lambda path, project: yaml.safe_load(path.read_text()))
    assert any("(Dockerfile) is not a regular file" in problem for problem in refused.value.problems), \
        refused.value.problems


def test_the_platform_s_arguments_are_judged_with_the_engine_s_own_platforms(host: PluginHost, tmp_path: Path) -> None:
    """`FROM build-${TARGETARCH}` (Docker's multi-platform pattern: containerd, the docker CLI, vaultwarden) is judged
    with every value a native Linux engine gives it, where the compose file chooses no platform; a compose file's
    `platform` or `platforms` chooses the values, and then the file is refused as before."""
    from orchestrator.rendering.dockerfile_variables import NATIVE_PLATFORM

    multi = ("FROM --platform=$BUILDPLATFORM golang:1.22 AS build\nFROM alpine AS binary-linux\n"
             "FROM scratch AS build_amd64\nFROM binary-$TARGETOS AS binary\nFROM build_${TARGETARCH}${TARGETVARIANT}\n")
    assert text_problems(multi, "Dockerfile", platform=NATIVE_PLATFORM) == []
    [problem] = text_problems(multi, "Dockerfile")
    assert "through TARGETOS" in problem
    # each value is judged: 386 is hex digits, an image's id; the file's own default for one is judged too
    [problem] = text_problems("FROM ${TARGETARCH}\n", "Dockerfile", platform=NATIVE_PLATFORM)
    assert ID in problem and "386" in problem
    [problem] = text_problems("ARG TARGETVARIANT=3f2a9c\nFROM ${TARGETVARIANT}\n", "Dockerfile",
                              platform=NATIVE_PLATFORM)
    assert ID in problem and "3f2a9c" in problem
    repo = make_repo(tmp_path / "r", config_for("go"), files={"Dockerfile": "FROM alpine AS build-amd64\n"
                                                             "FROM build-${TARGETARCH}\n"})
    context = make_context("acme", "shop", 1, 8001, 9001, b"k")

    def render_with(service: dict) -> None:
        compose = {"services": {"app": {"build": {"context": str(repo)}, **service}}}
        (repo / "compose.preview.yml").write_text(yaml.safe_dump(compose))
        render_deployment(host, repo, load_checkout_config(host, repo), context,
                          normalize=lambda path, project: yaml.safe_load(path.read_text()))

    render_with({})
    for chosen in ({"platform": "linux/3f2a9c1d"}, {"build": {"context": str(repo), "platforms": ["linux/arm64"]}}):
        with pytest.raises(ConfigError) as refused:
            render_with(chosen)
        assert any("through TARGETARCH" in problem for problem in refused.value.problems), refused.value.problems


def test_the_build_reads_the_bytes_judged_wherever_compose_would_look(host: PluginHost, tmp_path: Path) -> None:
    """compose cleans `a/../Dockerfile` as text and BuildKit resolves a link inside the Dockerfile's own directory:
    the build always reads the service's copy of what was judged, and a Dockerfile the check cannot find is
    refused, never skipped. buildx bake's templates (`%{ }`) in a build are refused, and bake is not used."""
    repo = make_repo(tmp_path / "r", config_for("go"), files={"Dockerfile": "FROM po-build/0123-app\n",
                                                             "good/Dockerfile": "FROM alpine\n", "README.md": ""})
    (repo / "sub").mkdir()
    (repo / "sub" / "Dockerfile").symlink_to("../good/Dockerfile")
    context = make_context("acme", "shop", 1, 8001, 9001, b"k")

    def render_with(build: dict) -> dict:
        (repo / "compose.preview.yml").write_text(yaml.safe_dump({"services": {"app": {"build": build}}}))
        return render_deployment(host, repo, load_checkout_config(host, repo), context,
                                 normalize=lambda path, project: yaml.safe_load(path.read_text()))

    for dockerfile in ("README.md/../Dockerfile", "nodir/../Dockerfile"):  # compose reads ./Dockerfile
        with pytest.raises(ConfigError) as refused:
            render_with({"context": str(repo), "dockerfile": dockerfile})
        assert any(BUILT in problem for problem in refused.value.problems), refused.value.problems
    with pytest.raises(ConfigError) as refused:
        render_with({"context": str(repo), "dockerfile": "missing/Dockerfile"})
    assert any("is not in the repository" in problem for problem in refused.value.problems), refused.value.problems
    rendered = render_with({"context": str(repo / "sub")})  # a link: judged and built as the file it names here
    assert rendered.compose["services"]["app"]["build"]["dockerfile"].endswith("r.build/app.Dockerfile")
    assert rendered.build_files["app.Dockerfile"] == "FROM alpine\n"
    for build in ({"context": str(repo / "good"), "dockerfile_inline": "#%{ if true } syntax=x/y%{ endif }\nFROM b\n"},
                  {"context": str(repo / "good"), "args": {"BUILD%{ if true }%{ endif }KIT_SYNTAX": "x/y"}}):
        with pytest.raises(ConfigError) as refused:
            render_with(build)
        assert any("may not hold %{" in problem for problem in refused.value.problems), refused.value.problems
    assert HostEnv.for_state_dir(tmp_path, {}).docker()["COMPOSE_BAKE"] == "false"
    # the copy is judged as it is read, once: a process a build command left running (BUILD_COMMANDS_MODE=host)
    # could change the file between a check's read and a copy's
    (repo / "good" / "Dockerfile").write_text("FROM po-build/0123-app\n")
    with pytest.raises(ConfigError) as refused:
        keyed_dockerfile(repo, repo / "good" / "Dockerfile", "app.Dockerfile", "Dockerfile", context, {})
    assert any(BUILT in problem for problem in refused.value.problems), refused.value.problems


def test_a_compose_file_s_dockerfile_inline_is_judged_as_a_dockerfile(host: PluginHost, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config_for("go"))
    context = make_context("acme", "shop", 1, 8001, 9001, b"k")

    def render_with(build: dict) -> None:
        compose = {"services": {"app": {"build": {"context": str(repo), **build}}}}
        (repo / "compose.preview.yml").write_text(yaml.safe_dump(compose))
        render_deployment(host, repo, load_checkout_config(host, repo), context,
                          normalize=lambda path, project: yaml.safe_load(path.read_text()))

    for build in ({"dockerfile_inline": "FROM 3f2a9c1d\n"},
                  {"dockerfile_inline": "ARG I\nFROM $I\n", "args": {"I": "3f2a9c1d"}},
                  {"dockerfile_inline": "ARG I\nFROM $I\n", "args": ["I=3f2a9c1d"]}):
        with pytest.raises(ConfigError) as refused:
            render_with(build)
        assert any(ID in problem for problem in refused.value.problems), refused.value.problems
    (repo / "Dockerfile").write_text("ARG I\nFROM $I\n")
    with pytest.raises(ConfigError) as refused:
        render_with({"args": {"I": "3f2a9c1d"}})  # a Dockerfile of the repository, with compose's argument
    assert any(ID in problem for problem in refused.value.problems), refused.value.problems
    render_with({"dockerfile_inline": "ARG V=3.12\nFROM python:${V}\n"})


def test_a_template_s_value_from_the_repository_cannot_add_instructions(host: PluginHost, tmp_path: Path) -> None:
    """A Cargo.toml's binary name and a Go command's directory name go into the injected Dockerfile: a line break in
    one would be a COPY --from of another preview's image, past every check of a repository's Dockerfile."""
    context = make_context("acme", "shop", 1, 8001, 9001, b"k", build_cache=True)
    hostile = "a\nCOPY --from=3f2a9c1d / /loot\nRUN true #"
    rust = make_repo(tmp_path / "rust", config_for("rust"), files={"Cargo.toml": _toml(hostile),
                                                                   "src/main.rs": "fn main() {}\n"})
    directory = "a\nFROM 3f2a9c1d AS loot\nRUN true #"  # git allows a line break in a file's name
    go = make_repo(tmp_path / "go", config_for("go"), files={"go.mod": "module example.com/shop\n\ngo 1.22\n",
                                                             f"cmd/{directory}/main.go": "package main\n"})
    for repo in (rust, go):
        rendered = render_deployment(host, repo, load_checkout_config(host, repo), context)
        text = rendered.files[INJECTED_DOCKERFILE]
        assert "3f2a9c1d" not in text and "loot" not in text  # the name is not the template's to use
        assert injected_problems(text, context, "Dockerfile") == []
    # and the rendered text is judged whatever a template put in it (a third party's plugin, a value missed)
    template = "FROM rust:1 AS build\nRUN cargo build --bin {name}\nFROM debian:12\nCOPY --from=build /a /a\n"
    [problem] = injected_problems(template.format(name=hostile), context, "the rust framework's Dockerfile")
    assert ID in problem
    assert injected_problems(template.format(name="server"), context, "Dockerfile") == []
    for extra, refused in (("RUN --network=host true\n", "RUN --network"),
                           ("RUN --mount=type=cache,target=/root/.cache true\n", "a cache mount the service did not"),
                           ("FROM po-build/0123-app\n", BUILT)):
        [problem] = injected_problems(template.format(name="server") + extra, context, "Dockerfile")
        assert refused in problem


def test_an_injected_dockerfile_may_start_from_its_base_preview_s_dependencies_and_nothing_else_built() -> None:
    base = BaseDependencies(image="po-build/0123456789abcdef0123456789abcdef-dependencies", installed="x")
    context = make_context("acme", "shop", 1, 8001, 9001, b"k").model_copy(update={"base_dependencies": base})
    text = f"FROM {base.image} AS dependencies\nFROM dependencies AS build\nFROM node:20\nCOPY --from=build /a /a\n"
    assert injected_problems(text, context, "Dockerfile") == []
    [problem] = injected_problems(text + "COPY --from=po-build/0123-app /a /b\n", context, "Dockerfile")
    assert BUILT in problem
    [problem] = injected_problems(text, context.model_copy(update={"base_dependencies": None}), "Dockerfile")
    assert BUILT in problem


def _toml(bin_name: str) -> str:
    escaped = bin_name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'[package]\nname = "shop"\nversion = "0.1.0"\n\n[[bin]]\nname = "{escaped}"\npath = "src/main.rs"\n'
