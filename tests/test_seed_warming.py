"""After a reset, the seed's files the database had copied up are opened for writing again as it starts
(runtime/seed_warming.py): which files, and how they are named to the container."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.runtime.seed_warming import BATCH, MIN_BYTES, touch_commands, used_files


def sized(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        file.truncate(size)
    return path


def test_only_large_regular_files_the_seed_holds_too_are_warmed(tmp_path: Path) -> None:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    for name in ("base/1/16384", "base/1/16390", "pg_wal/000000010000000000000001", "global/small"):
        sized(lower / name, MIN_BYTES * 2)
    sized(upper / "base/1/16384", MIN_BYTES * 2)  # a table the preview used: copied up
    sized(upper / "pg_wal/000000010000000000000001", MIN_BYTES)  # exactly the threshold
    sized(upper / "global/small", MIN_BYTES - 1)  # too small to be worth it
    sized(upper / "base/1/99999", MIN_BYTES * 3)  # written by the preview: the seed has no such file
    (lower / "base/2").mkdir(parents=True)
    sized(upper / "base/2", MIN_BYTES)  # a file above, a directory below: not the seed's file
    outside = sized(tmp_path / "outside" / "big", MIN_BYTES * 2)
    os.symlink(outside, upper / "base/1/16390")  # a link, even to a large file, is never warmed
    os.symlink(outside.parent, upper / "linked")  # nor is a linked directory entered
    assert used_files(upper, lower) == ["base/1/16384", "pg_wal/000000010000000000000001"]
    assert used_files(tmp_path / "missing", lower) == []


def test_the_files_are_named_in_the_container_under_its_data_path_in_batches() -> None:
    files = [f"base/1/{n}" for n in range(BATCH + 1)]
    commands = touch_commands("acme-api-pr-2-db", "/var/lib/postgresql/data/", files)
    assert [argv[:3] for argv in commands] == [["exec", "acme-api-pr-2-db", "touch"]] * 2
    assert commands[0][3] == "/var/lib/postgresql/data/base/1/0" and len(commands[0]) == 3 + BATCH
    assert commands[1][3:] == [f"/var/lib/postgresql/data/base/1/{BATCH}"]
