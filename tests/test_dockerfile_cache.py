"""A repository's Dockerfile's cache mounts are keyed to its repository (rendering/dockerfile_cache.py): BuildKit
shares a cache mount by its id, or by its target when it has none, across the whole engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.rendering.dockerfile_cache import CacheMountRefused, keyed_cache_mounts


def key(name: str) -> str:
    return f"po-cache-k({name})"


def keyed(text: str) -> str | None:
    return keyed_cache_mounts(text, key, "Dockerfile")


def test_a_dockerfile_without_cache_mounts_is_used_as_it_is() -> None:
    text = "FROM base\nRUN --mount=type=bind,source=x,target=/x make\nRUN --network=none make test\n"
    assert keyed(text) is None


def test_each_cache_mount_gets_an_id_keyed_by_the_repository() -> None:
    text = ("# syntax=docker/dockerfile:1\nFROM base AS build\n"
            "RUN --mount=type=cache,target=/root/.npm --mount=type=bind,source=a,target=/a npm ci\n"
            "RUN --network=none --mount=TYPE=CACHE,id=shared,target=/x,sharing=locked make\n"
            "COPY . .\n")
    assert keyed(text) == (
        "# syntax=docker/dockerfile:1\nFROM base AS build\n"
        "RUN --mount=type=cache,target=/root/.npm,id=po-cache-k(/root/.npm) --mount=type=bind,source=a,target=/a "
        "npm ci\n"
        "RUN --network=none --mount=TYPE=CACHE,target=/x,sharing=locked,id=po-cache-k(shared) make\n"
        "COPY . .\n")


def test_continuations_comments_inside_them_and_the_escape_directive_are_read_as_buildkit_reads_them() -> None:
    text = ("FROM base\nRUN --mount=type=cache,target=/c \\\n# a comment inside the instruction\n\n"
            "    --mount=type=cache,target=/d \\\n    make all\nCMD [\"x\"]\n")
    assert keyed(text) == ("FROM base\nRUN --mount=type=cache,target=/c,id=po-cache-k(/c) "
                           "--mount=type=cache,target=/d,id=po-cache-k(/d) make all\nCMD [\"x\"]\n")
    windows = "# escape=`\nFROM base\nRUN --mount=type=cache,target=/c `\n    make\n"
    assert keyed(windows) == "# escape=`\nFROM base\nRUN --mount=type=cache,target=/c,id=po-cache-k(/c) make\n"


@pytest.mark.parametrize(("text", "reason"), [
    ("FROM b\nRUN --mount=type=$KIND,target=/c make\n", "a --mount with a variable is not allowed"),
    ("FROM b\nRUN --mount=type=cache,target=${HOME}/.cache make\n", "a --mount with a variable is not allowed"),
    ("FROM b\nRUN --mount=\"type=cache,target=/c\" make\n", "a flag with quotes"),
    ("FROM b\nRUN --security=insecure --mount=type=cache,target=/c make\n", "RUN --security is not allowed"),
    ("FROM b\nRUN --network=host make\n", "RUN --network is not allowed"),
    ("FROM b\nRUN --mount type=cache,target=/c make\n", "RUN flag --mount cannot be read"),
    ("FROM b\nONBUILD RUN --mount=type=cache,target=/c make\n", "ONBUILD with a mount is not allowed"),
    ("FROM b\nRUN --mount=type=cache,id=x make\n", "a cache mount without a target"),
    ("FROM b\nRUN <<EOF\nRUN --mount=type=cache,target=/c make\nEOF\n", None),
    ("FROM b\nRUN echo type=cache\n", "a cache mount the service cannot read"),
])
def test_what_cannot_be_read_is_refused_with_the_reason(text: str, reason: str | None) -> None:
    if reason is None:  # a heredoc's body is read as instructions too: rewritten, never passed on unread
        assert "id=po-cache-k(/c)" in (keyed(text) or "")
        return
    with pytest.raises(CacheMountRefused, match=reason.replace("$", r"\$").replace("(", r"\(")):
        keyed(text)


@given(st.lists(st.sampled_from([
    "FROM base\n", "RUN make\n", "RUN --mount=type=cache,target=/a make \\\n  all\n", "# note\n", "\n",
    "RUN --mount=type=cache,id=x,target=/b,sharing=private go build\n", "COPY . .\n", "RUN --network=none x\n",
    "RUN --mount=type=secret,id=npm,target=/s cat /s\n", "  run --mount=type=cache,target=/c \\\n# c\n  x\n",
]), max_size=12))
def test_every_cache_mount_of_any_file_ends_up_keyed_and_nothing_else_changes(parts: list[str]) -> None:
    text = "".join(parts)
    result = keyed(text)
    if result is None:
        assert "type=cache" not in text
        return
    again = keyed_cache_mounts(result, lambda name: name, "Dockerfile")  # keyed ids are kept by an identity key
    assert again is not None and again.count("type=cache") == text.count("type=cache")
    for line in result.splitlines():
        if "type=cache" in line:
            assert all("id=po-cache-k(" in part for part in line.split("--mount=") if part.startswith("type=cache"))
    def others(document: str) -> list[str]:  # the instructions without a cache mount, in their order
        return [line for line in document.splitlines()
                if line and "type=cache" not in line and not line.startswith((" ", "#"))]

    assert others(result) == others(text)


@pytest.mark.parametrize(("text", "reason"), [
    # line breaks and spaces Python sees and BuildKit (Go, \n only) does not: a raw id would pass unread
    ("FROM b\nRUN --mount=target=/x\x1c#,type=cache,id=victim make\n", "control characters or unusual spaces"),
    ("FROM b\nRUN --mount=target=/x\u2028#,type=cache,id=victim make\n", "control characters or unusual spaces"),
    ("FROM b\nRUN --mount=id=victim,target=/a\\\n\x1f#,type=cache make\n", "control characters or unusual spaces"),
    # another frontend would build whatever it likes, past every check
    ("# syntax=attacker/frontend:1\nFROM b\nRUN make\n", "# syntax=attacker/frontend:1 is not allowed"),
    ("\ufeff#syntax = ghcr.io/evil/df\nFROM b\n", "is not allowed"),
])
def test_what_buildkit_would_read_otherwise_is_refused(text: str, reason: str) -> None:
    with pytest.raises(CacheMountRefused, match=re.escape(reason)):
        keyed(text)


def test_buildkit_s_own_frontend_may_be_named() -> None:
    text = "# syntax=docker/dockerfile:1.7\nFROM b\nRUN --mount=type=cache,target=/c make\n"
    assert keyed(text) == ("# syntax=docker/dockerfile:1.7\nFROM b\n"
                           "RUN --mount=type=cache,target=/c,id=po-cache-k(/c) make\n")
    assert keyed("# syntax=docker/dockerfile:1\nFROM b\n") is None


def test_a_dockerfile_larger_than_the_limit_is_refused_whole(tmp_path: Path) -> None:
    """BuildKit reads all of it: a check of its first MiB alone would let the rest through."""
    from orchestrator.plugin_api.preview_config import ConfigError
    from orchestrator.rendering.dockerfile_policy import MAX_DOCKERFILE_BYTES, judged_dockerfile

    big = tmp_path / "Dockerfile"
    big.write_text("FROM busybox\n" + "# pad\n" * (MAX_DOCKERFILE_BYTES // 6) + "FROM 3f\n")
    with pytest.raises(ConfigError) as refused:
        judged_dockerfile(tmp_path, big, "Dockerfile")
    assert refused.value.problems == ["Dockerfile is larger than 1024 KiB"]


def test_a_dockerfile_is_read_beneath_its_checkout_and_no_link_swapped_in_is_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link the repository commits is followed once, inside it; one that leaves it, or one a process left running
    swaps in after that check (realpath's answer stale), fails the read instead of reaching another file."""
    import os

    from orchestrator.common import checkout_paths
    from orchestrator.plugin_api.preview_config import ConfigError
    from orchestrator.rendering.dockerfile_policy import judged_dockerfile

    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "good").mkdir(parents=True)
    outside.mkdir()
    (repo / "good" / "Dockerfile").write_text("FROM alpine\n")
    (outside / "Dockerfile").write_text("FROM alpine\nRUN echo from-the-host\n")
    (repo / "sub").symlink_to("good")
    (repo / "away").symlink_to(outside)
    assert judged_dockerfile(repo, repo / "sub" / "Dockerfile", "Dockerfile") == "FROM alpine\n"
    with pytest.raises(ConfigError, match="not in the repository"):
        judged_dockerfile(repo, repo / "away" / "Dockerfile", "Dockerfile")
    # the link checked, then swapped: the read follows no link and fails
    monkeypatch.setattr(checkout_paths.os.path, "realpath", lambda path: os.path.abspath(path))
    with pytest.raises(ConfigError, match="cannot be read"):
        judged_dockerfile(repo, repo / "away" / "Dockerfile", "Dockerfile")
    with pytest.raises(ConfigError, match="cannot be read"):
        judged_dockerfile(repo, repo / "sub" / "Dockerfile", "Dockerfile")
    assert judged_dockerfile(repo, repo / "good" / "Dockerfile", "Dockerfile") == "FROM alpine\n"


def test_only_a_regular_file_of_one_link_is_read_and_nothing_else_is_opened(tmp_path: Path) -> None:
    """A build command may leave a FIFO, a device node or a hard link to another file at a name the service reads:
    the file is looked at through a descriptor that opens nothing, so a FIFO never blocks the flow, a device's
    driver never runs, and a hard link (which may name any file of its file system) is refused."""
    import os

    from orchestrator.common.checkout_paths import UnsafeCheckout, check_links, read_beneath, read_plain

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "Dockerfile").write_text("FROM alpine\n")
    os.mkfifo(repo / "fifo")
    (repo / "dir").mkdir()
    os.link(repo / "Dockerfile", repo / "linked")
    before = len(os.listdir("/proc/self/fd"))
    for name, reason in (("fifo", "not a regular file"), ("dir", "not a regular file"),
                         ("linked", "other hard links"), ("Dockerfile", "other hard links")):
        with pytest.raises(OSError, match=reason):
            read_beneath(repo, repo / name, 1024)
        assert read_plain(repo, name) is None
    assert len(os.listdir("/proc/self/fd")) == before  # nothing left open on the way
    os.unlink(repo / "linked")
    assert read_beneath(repo, repo / "Dockerfile", 1024) == b"FROM alpine\n"
    assert read_plain(repo, "Dockerfile") == "FROM alpine\n"
    with pytest.raises(UnsafeCheckout, match="special files .* fifo"):
        check_links(repo)
