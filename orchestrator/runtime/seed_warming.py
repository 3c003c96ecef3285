"""The files a preview's database had read from its seed, warmed again after `/preview reset-db`.

A layered copy (DatabaseSeed.layered) sees the seed's files through an overlay, and the database's first open of a
file for writing copies it whole into the preview's layer: the first query of a 350 MB table waited 1–1.5 s for
it (docs/benchmarks.md). A reset throws that layer away, and the files the preview had copied up are the ones it
will use again; so they are listed before the layer goes and opened for writing again in the new database's
container as it starts (`touch`, run in the container: paths resolve in its own view of its files), beside the
app's start instead of on the first query. Only files the seed holds too and of at least MIN_BYTES: what is worth
the copy, and nothing the new database does not have already.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MIN_BYTES = 1 << 20
MAX_FILES = 2000  # a data directory's large files: tables and indexes, 1 GB segments each at most
BATCH = 200  # paths per `docker exec … touch`


def used_files(upper: Path, lower: Path) -> list[str]:
    """The regular files of at least MIN_BYTES in the overlay's upper directory `upper` that its lower directory
    `lower` (the seed) holds as regular files too, relative to both; links are never followed into."""
    found: list[str] = []
    for directory, _, names in os.walk(upper):  # followlinks=False: a link to a directory is not entered
        for name in names:
            path = Path(directory) / name
            relative = path.relative_to(upper)
            try:
                above, below = path.lstat(), (lower / relative).lstat()
            except OSError:
                continue
            if stat.S_ISREG(above.st_mode) and above.st_size >= MIN_BYTES and stat.S_ISREG(below.st_mode):
                found.append(relative.as_posix())
                if len(found) >= MAX_FILES:
                    return sorted(found)
    return sorted(found)


def touch_commands(container: str, data_path: str, files: list[str]) -> list[list[str]]:
    """The `docker exec` argument lists that open `files` (relative to `data_path` in `container`) for writing."""
    paths = [f"{data_path.rstrip('/')}/{name}" for name in files]
    return [["exec", container, "touch", *paths[start:start + BATCH]] for start in range(0, len(paths), BATCH)]
