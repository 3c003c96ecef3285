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
    own = read_plain(repo_dir, IGNORE_FILE) or ""
    own = own.split(f"\n{MARKER}\n", 1)[0].removesuffix("\n") if MARKER in own else own.rstrip("\n")
    if own.startswith(MARKER):
        own = ""
    entries = sorted({".git", *names})
    block = "\n".join([MARKER, *(f"/{name}" for name in entries)]) + "\n"
    write_new(repo_dir, IGNORE_FILE, f"{own}\n\n{block}" if own else block)
