"""What the service writes into a checkout stays out of the images built from it.

The compose file (with the preview's database password and host ports), the injected Dockerfile and the `.git`
file of the separate git directory differ from one preview to the next. In a build context they would land in
the image with `COPY . .` and make its layer — and every step after it, a whole `go build` or `npm ci` — new
for each pull request, even at the same commit. So the checkout's `.dockerignore` (the repository's own, when
it has one, kept as it is) gains them; a build of the same commit then reuses every cached layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from orchestrator.common.checkout_paths import read_plain, write_new

IGNORE_FILE = ".dockerignore"
MARKER = "# preview-orchestrator: files it writes into the checkout stay out of images"


def keep_out_of_images(repo_dir: Path, names: Iterable[str]) -> None:
    """Append `names` (and `.git`) to the checkout's `.dockerignore`, replacing what an earlier deploy of this
    checkout appended. Patterns are anchored (`/name`): a file of that name deeper in the tree stays in."""
    names = list(names)
    own = read_plain(repo_dir, IGNORE_FILE) or ""
    own = own.split(f"\n{MARKER}\n", 1)[0].removesuffix("\n") if MARKER in own else own.rstrip("\n")
    if own.startswith(MARKER):
        own = ""
    # BuildKit reads `<Dockerfile>.dockerignore` before `.dockerignore`: a pull request's own file of that name
    # beside an injected Dockerfile would decide what enters its image (the Dockerfile itself, with the
    # repository's build-cache id, included). Each injected Dockerfile gets the same rules in its own file.
    own_files = [f"{name}{IGNORE_FILE}" for name in names if name.startswith("Dockerfile")]
    entries = sorted({".git", *names, *own_files})
    block = "\n".join([MARKER, *(f"/{name}" for name in entries)]) + "\n"
    text = f"{own}\n\n{block}" if own else block
    for name in [IGNORE_FILE, *own_files]:
        write_new(repo_dir, name, text)
