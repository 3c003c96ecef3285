"""What the service says of each data seed it keeps (data_seeds.py): `<state dir>/database-seeds/data/<key>.json`,
written when a restore ends, read by `preview-orchestrator seeds`, doctor and the eviction. The file's time is
when a preview last started from the seed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.plugin_api import Check, WarmPool


@dataclass(frozen=True)
class SeedInfo:
    """One data seed, as `<state dir>/database-seeds/data/<key>.json` and its file's time say."""

    key: str
    repository: str
    source: str
    image: str
    size_bytes: int
    made_at: float
    seconds: float
    used_at: float


def record_seed(directory: Path, seed: SeedInfo) -> None:
    """The marker of a restored seed, written whole or not at all (its presence says the seed is ready)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    marker = directory / f"{seed.key}.json"
    partial = marker.with_suffix(".partial")
    partial.write_text(json.dumps({"key": seed.key, "repository": seed.repository, "source": seed.source,
                                   "image": seed.image, "sizeBytes": seed.size_bytes, "madeAt": seed.made_at,
                                   "seconds": seed.seconds}))
    partial.replace(marker)


def listed_seeds(state_dir: Path) -> list[SeedInfo]:
    """Every data seed the service with `state_dir` keeps, most recently used first."""
    directory = state_dir / "database-seeds" / "data"
    found = []
    for marker in directory.glob("*.json") if directory.is_dir() else []:
        try:
            raw = json.loads(marker.read_text())
            found.append(SeedInfo(key=str(raw["key"]), repository=str(raw["repository"]), source=str(raw["source"]),
                                  image=str(raw["image"]), size_bytes=int(raw["sizeBytes"]),
                                  made_at=float(raw["madeAt"]), seconds=float(raw["seconds"]),
                                  used_at=marker.stat().st_mtime))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda seed: seed.used_at, reverse=True)


def free_spares(state_dir: Path) -> dict[str, int]:
    """How many free spare layers (seed_spares.py) each seed has: a marker `po-spare-<marker>-<key>-<nonce>` each."""
    directory = state_dir / "database-seeds" / "spares"
    counts: dict[str, int] = {}
    try:
        names = [marker.name for marker in directory.iterdir()]
    except FileNotFoundError:  # none made yet
        return counts
    for name in names:
        parts = name.split("-")
        if len(parts) == 5 and parts[:2] == ["po", "spare"]:
            counts[parts[3]] = counts.get(parts[3], 0) + 1
    return counts


@dataclass(frozen=True)
class KeptSeed:
    """A seed with its free spare layers, each counted at the seed's size (a spare holds a copy of it)."""

    seed: SeedInfo
    spares: int

    @property
    def spare_bytes(self) -> int:
        return self.seed.size_bytes * self.spares


def kept_seeds(state_dir: Path) -> list[KeptSeed]:
    """Every seed kept, most recently used first, with its free spares: what `seeds`, doctor and the dashboard
    count (spares of a seed gone are not: `sweep` takes them)."""
    spares = free_spares(state_dir)
    return [KeptSeed(seed, spares.get(seed.key, 0)) for seed in listed_seeds(state_dir)]


def warm_pools(state_dir: Path) -> list[WarmPool]:
    """Each repository's seed and its free spare layers: what the dashboard lists. A marker that does not make
    a pool is left out."""
    pools = []
    for kept in kept_seeds(state_dir):
        seed = kept.seed
        try:
            pools.append(WarmPool(repository=seed.repository, kind="database seed", detail=seed.source, count=1,
                                  size_bytes=seed.size_bytes, used_at=seed.used_at))
            if kept.spares:
                pools.append(WarmPool(repository=seed.repository, kind="spare layers", count=kept.spares,
                                      detail="of that seed, made ahead", size_bytes=kept.spare_bytes))
        except ValueError:
            continue
    return pools


def seeds_check(state_dir: Path, cache_bytes: int) -> Check:
    """doctor's line of the data seeds kept and their free spares, against SEED_CACHE_GB."""
    kept = kept_seeds(state_dir)
    size = sum(k.seed.size_bytes for k in kept)
    spare_bytes = sum(k.spare_bytes for k in kept)
    count = sum(k.spares for k in kept)
    line = (f"{len(kept)} repository seed{'s' if len(kept) != 1 else ''}, {size / 2**30:.2f} GB, and {count} "
            f"spare{'s' if count != 1 else ''}, {spare_bytes / 2**30:.2f} GB")
    return Check("database seeds", True, f"{line} of SEED_CACHE_GB {cache_bytes / 2**30:.0f} GB "
                                         "(preview-orchestrator seeds)")
