"""What a repository's Dockerfile may not do, judged on its text as BuildKit reads all of it: name the service's
namespace of built images (po-build/) or an image by its id (which Docker resolves against every local image,
another preview's built one too). Its cache mounts are made the repository's own by dockerfile_cache.py."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.plugin_api.types import BUILT_IMAGES

MAX_DOCKERFILE_BYTES = 1024 * 1024  # a Dockerfile or dockerfile_inline larger than this is refused, not cut


# An image id or a prefix of one, which Docker resolves against every local image: a built image of another preview
# too, whatever its name. Refused as `image:`, `FROM`, `COPY --from` and a mount's `from=`.
IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{1,64}", re.IGNORECASE)
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE | re.MULTILINE)
_FROM_FLAG = re.compile(r"(?:--from=|[\s,]from=)([^\s,]+)", re.IGNORECASE)


def dockerfile_problems(path: Path, shown: str) -> list[str]:
    """A repository's Dockerfile may not name the service's namespace of built images (in FROM, `COPY --from`,
    `RUN --mount=from=`, or a build argument's default): another preview's image would be its base or source.
    The names there are also keyed (RenderContext.built_image): this keeps even a leaked one out."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [f"{shown} cannot be read ({exc.strerror})"]
    if len(data) > MAX_DOCKERFILE_BYTES:  # BuildKit reads all of it: what is judged must be all of it
        return [f"{shown} is larger than {MAX_DOCKERFILE_BYTES // 1024} KiB"]
    text = data.decode("utf-8", "replace")
    if names_built_images(text):
        return [f"{shown} may not name {BUILT_IMAGES}/ (it holds the images built for previews)"]
    froms = list(_FROM.finditer(text))
    # a stage's name or index (`COPY --from=builder`, `--from=0`) is not an image
    stages = {match[2].lower() for match in froms if match[2]} | {str(index) for index in range(len(froms))}
    sources = [match[1] for match in froms] + [match[1] for match in _FROM_FLAG.finditer(text)]
    ids = [source for source in sources if IMAGE_ID.fullmatch(source) and source.lower() not in stages]
    if ids:
        return [f"{shown} may not name an image by its id ({ids[0][:20]}: it names whatever image the host has)"]
    return []


def names_built_images(text: str) -> bool:
    # joined across line continuations (`\` or, with `# escape=\``, a backtick)
    return f"{BUILT_IMAGES}/" in text.lower().replace("\\\n", "").replace("`\n", "")
