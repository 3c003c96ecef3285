"""Overlay copies of a seed (DatabaseSeed.layered) on this host's Docker engine: a preview's database volume is an
overlay mount (the engine's local driver) whose lower directory is the seed's volume and whose upper and work
directories are those of a *layer* volume — the preview's own `<volume>-layer`, or a spare made ahead
(seed_spares.py). The overlay volume holds nothing itself; its LAYER_VOLUME_LABEL names the layer, which is removed
with it."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from orchestrator.plugin_api import CommandFailed, DeploymentLog, HostEnv

log = logging.getLogger("orchestrator.runtime.seeds")

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_VOLUME_LABEL = "com.docker.compose.volume"
LAYER_LABEL = "dev.preview-orchestrator.layered-on"  # on an overlay copy of a seed and its layer: the seed's volume
LAYER_VOLUME_LABEL = "dev.preview-orchestrator.layer"  # on an overlay copy of a seed: the volume of its layer
NONCE_LABEL = "dev.preview-orchestrator.layer-nonce"  # on a layer volume: proof that this copy created it
# On a holder (a container created, never started, that mounts a copy's layer and seed, so that the engine counts
# them in use: `docker volume prune` and `volume rm` leave them): the deployment, and the copy's volume
HOLDER_LABEL = "dev.preview-orchestrator.holder-of"
HELD_LABEL = "dev.preview-orchestrator.holds"

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
    root `lower` is (it is the overlay's root); its mount point. A volume of that name that this call did not create
    (a nonce label tells: `volume create` of an existing name succeeds) is refused, and the upper directory is changed
    through a descriptor that follows no link. CommandFailed or OSError when it cannot be."""
    nonce = uuid.uuid4().hex
    marked = {**labels, NONCE_LABEL: nonce}
    docker(["volume", "create", *[a for pair in marked.items() for a in ("--label", "=".join(pair))], layer])
    if volume_label(docker, layer, NONCE_LABEL) != nonce:
        raise OSError(f"{layer} exists and is not this copy's")
    top = Path(mountpoint(docker, layer))
    (top / "upper").mkdir(mode=0o755)
    (top / "work").mkdir(mode=0o700)
    below = os.stat(lower)
    upper = os.open(top / "upper", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(upper, below.st_uid, below.st_gid)
        os.fchmod(upper, below.st_mode & 0o7777)
    finally:
        os.close(upper)
    return str(top)


def overlay_options(lower: str, top: str) -> list[str]:
    """`docker volume create` options of an overlay on `lower` whose layer's files are under `top`."""
    return ["--driver", "local", "--opt", "type=overlay", "--opt", "device=overlay",
            "--opt", f"o=lowerdir={lower},upperdir={top}/upper,workdir={top}/work"]


def pinned(docker: Docker, seed_volume: str, besides: str | None = None) -> bool:
    """Whether a preview's copy is an overlay on `seed_volume` (its LAYER_LABEL names it): the engine does not know
    that an overlay reads it, so the seed must stay until that copy goes. `besides`: a copy (and its own layer)
    not counted, the failed one about to be removed."""
    found = set(docker(["volume", "ls", "--quiet", "--filter", f"label={LAYER_LABEL}={seed_volume}"]).split())
    return bool(found - {besides, layer_volume(besides)} if besides else found)


def volume_label(docker: Docker, volume: str, name: str) -> str:
    """The volume's label `name`; "" when it has none. CommandFailed when the engine cannot say."""
    return docker(["volume", "inspect", "--format", f'{{{{index .Labels "{name}"}}}}', volume]).strip()


def layer_of(docker: Docker, volume: str, spare_prefix: str) -> str | None:
    """The layer volume of the overlay copy `volume` as its label names it, when it is one a layered copy may have
    (its own `-layer`, or one of this service's spares); None for any other volume."""
    try:
        named = volume_label(docker, volume, LAYER_VOLUME_LABEL)
    except CommandFailed:
        return None
    if named == layer_volume(volume) or (named.startswith(spare_prefix) and "/" not in named):
        return named
    return None


def create_layer(docker: Docker, create_marked: Callable[[str, dict[str, str], DeploymentLog, list[str]], bool],
                 volume: str, labels: dict[str, str], source: str, log_to: DeploymentLog,
                 spare: str | None = None) -> bool:
    """Create `volume` as an overlay on the seed volume `source` (DatabaseSeed.layered): the seed's files seen
    through it, what the preview writes kept in a layer volume — `spare`, one made ahead with the seed's files
    already in it (seed_spares.py), else a new `<volume>-layer`, labelled like `volume` without compose's labels so
    that the preview's cleanup removes it. The seed must stay while the copy exists (`pinned` says so). False
    (nothing left but `spare`) when it cannot be made here — the engine's volumes are not this host's files — and
    the caller copies. `create_marked` creates a volume marked as being copied (DatabaseSeeds). Its holder (`hold`)
    is made once the preview started, off the deploy's path."""
    layer = spare or layer_volume(volume)
    own = {k: v for k, v in labels.items() if k not in (COMPOSE_PROJECT_LABEL, COMPOSE_VOLUME_LABEL)}
    try:
        lower = mountpoint(docker, source)
        quietly(docker, ["rm", "--force", holder_name(volume)])  # of a copy a reset or failure removed
        if spare is not None:
            top = mountpoint(docker, spare)
        else:
            quietly(docker, ["volume", "rm", "--force", layer])  # the layer of a copy a reset or failure removed
            top = prepare_layer(docker, layer, {**own, LAYER_LABEL: source}, lower)
    except (CommandFailed, OSError) as exc:
        log_to.note(f"database seed copied, not layered ({exc})")
        quietly(docker, ["rm", "--force", holder_name(volume)])
        if spare is None:
            quietly(docker, ["volume", "rm", "--force", layer])
        return False
    if not create_marked(volume, {**labels, LAYER_LABEL: source, LAYER_VOLUME_LABEL: layer}, log_to,
                         overlay_options(lower, top)):
        quietly(docker, ["rm", "--force", holder_name(volume)])
        if spare is None:
            quietly(docker, ["volume", "rm", "--force", layer])
        return False
    return True


def holder_name(volume: str) -> str:
    return f"po-hold-{volume}"


def hold(docker: Docker, volume: str, seed: str, image: str, deployment_id: str) -> None:
    """Create the holder of the layered copy `volume` (nothing for a volume that is no overlay: a copy that fell
    back): a container never started that mounts its layer and its seed read only. No container mounts them
    otherwise (the overlay names their directories), so without it the engine would count them unused: `docker
    volume prune` removed a preview's data and every preview's seed. Made once the preview started, off its path."""
    try:
        if layer := volume_label(docker, volume, LAYER_VOLUME_LABEL):
            docker(["create", "--name", holder_name(volume), "--network", "none", "--label",
                    f"{HOLDER_LABEL}={deployment_id}", "--label", f"{HELD_LABEL}={volume}",
                    "--mount", f"type=volume,source={layer},target=/po-layer,readonly",
                    "--mount", f"type=volume,source={seed},target=/po-seed,readonly", "--entrypoint", "true", image])
    except CommandFailed as exc:
        log.warning("%s has no holder (%s): a prune of the engine's volumes could take its layer", volume,
                    exc.tail(2))


def release_holders(docker: Docker, selector: str) -> None:
    """Remove the holders carrying the label `selector` (`key=value`); with HELD_LABEL alone, every holder whose
    copy is gone (one listing of the volumes, whatever the number of holders)."""
    listed = docker(["ps", "--all", "--filter", f"label={selector}", "--format",
                     f'{{{{.Names}}}}\t{{{{.Label "{HELD_LABEL}"}}}}']).splitlines()
    volumes = set(docker(["volume", "ls", "--quiet"]).split()) if selector == HELD_LABEL and listed else set()
    for line in listed:
        name, _, volume = line.partition("\t")
        if selector != HELD_LABEL or volume not in volumes:
            quietly(docker, ["rm", "--force", name])


def quietly(docker: Docker, argv: list[str]) -> None:
    try:
        docker(argv, timeout=120)
    except CommandFailed:
        pass
