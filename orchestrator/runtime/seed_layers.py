"""Overlay copies of a seed (DatabaseSeed.layered) on this host's Docker engine: a preview's database volume is an
overlay mount (the engine's local driver) whose lower directory is the seed's volume and whose upper and work
directories are those of a *layer* volume — the preview's own `<volume>-layer`, or a spare made ahead
(seed_spares.py). The overlay volume holds nothing itself; its LAYER_VOLUME_LABEL names the layer, which is removed
with it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from orchestrator.plugin_api import CommandFailed, HostEnv

LAYER_VOLUME_LABEL = "dev.preview-orchestrator.layer"  # on an overlay copy of a seed: the volume of its layer

Docker = Callable[..., str]


def layer_volume(volume: str) -> str:
    """The volume that holds what a layered copy `volume` made without a spare wrote over its seed."""
    return f"{volume}-layer"


def spare_prefix(env: HostEnv) -> str:
    """The start of the names of this service's spare layers (seed_spares.py)."""
    return f"po-spare-{env.marker[:12]}-"


def mountpoint(docker: Docker, volume: str) -> str:
    """Where the engine keeps `volume`'s files on this host; OSError when overlay's options could not carry it."""
    path = docker(["volume", "inspect", "--format", "{{.Mountpoint}}", volume]).strip()
    if not path.startswith("/") or "," in path or ":" in path:
        raise OSError(f"{volume} has no mount point this service can layer on ({path[:80]!r})")
    return path


def prepare_layer(docker: Docker, layer: str, labels: dict[str, str], lower: str) -> str:
    """Create the layer volume `layer` with its empty upper and work directories, the upper one owned as the seed's
    root `lower` is (it is the overlay's root); its mount point. CommandFailed or OSError when it cannot be."""
    docker(["volume", "create", *[a for pair in labels.items() for a in ("--label", "=".join(pair))], layer])
    top = Path(mountpoint(docker, layer))
    (top / "upper").mkdir(mode=0o755)
    (top / "work").mkdir(mode=0o700)
    below = os.stat(lower)
    os.chown(top / "upper", below.st_uid, below.st_gid)
    os.chmod(top / "upper", below.st_mode & 0o7777)
    return str(top)


def overlay_options(lower: str, top: str) -> list[str]:
    """`docker volume create` options of an overlay on `lower` whose layer's files are under `top`."""
    return ["--driver", "local", "--opt", "type=overlay", "--opt", "device=overlay",
            "--opt", f"o=lowerdir={lower},upperdir={top}/upper,workdir={top}/work"]


def layer_of(docker: Docker, volume: str, spare_prefix: str) -> str | None:
    """The layer volume of the overlay copy `volume` as its label names it, when it is one a layered copy may have
    (its own `-layer`, or one of this service's spares); None for any other volume."""
    try:
        named = docker(["volume", "inspect", "--format", f'{{{{index .Labels "{LAYER_VOLUME_LABEL}"}}}}',
                        volume]).strip()
    except CommandFailed:
        return None
    if named == layer_volume(volume) or (named.startswith(spare_prefix) and "/" not in named):
        return named
    return None
