"""What every benchmark shares: the budget (full or smoke), a scratch directory, process memory."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Budget:
    """How much work a run does. `smoke` is the test suite's: every code path once, in seconds."""

    ack_rates: tuple[int, ...] = (50, 100, 200, 400)
    ack_seconds: float = 5.0
    ack_connections: int = 16
    saturation_connections: tuple[int, ...] = (1, 4, 16)
    saturation_requests: int = 500
    scale_sizes: tuple[int, ...] = (10, 1000, 10000)
    scale_requests: int = 200
    preview_repeats: int = 3
    concurrency_prs: int = 10
    concurrency_builds: tuple[int, ...] = (1, 2, 4)
    sleep_repeats: int = 5
    # issue 35's first pull request with a base preview (bench/prebuilt.py); nestjs's install npm packages
    prebuilt_scenarios: tuple[str, ...] = ("go", "nestjs", "nestjs-deps")
    density_previews: int = 500  # issue 35's figure
    density_wakes: int = 20  # sleeping Go previews woken one after the other: the p95 of their first requests
    density_idle_seconds: float = 60.0
    reconcile_repositories: int = 50
    reconcile_pulls: int = 20  # open pull requests per repository
    delivery_log_entries: int = 50_000
    seeded_rows: int = 3_000_000  # ~300 MB of SQL
    seeded_databases: tuple[str, ...] = ("postgres", "mysql")
    # A cold preview needs the engine's whole build cache pruned (BuildKit has no per-project prune) and its
    # dangling images removed: right on a quiet benchmark host, wrong in a contributor's test run, whose cache
    # and images are theirs. The smoke run keeps them: its "cold" figure is then not cold, and says so.
    prune_engine_caches: bool = True


SMOKE = Budget(ack_rates=(20,), ack_seconds=1.0, ack_connections=2, saturation_connections=(2,),
               saturation_requests=20, scale_sizes=(10,), scale_requests=5, preview_repeats=1,
               concurrency_prs=2, concurrency_builds=(2,), sleep_repeats=1, density_previews=2, density_wakes=1,
               prebuilt_scenarios=("go",), density_idle_seconds=3.0, prune_engine_caches=False,
               reconcile_repositories=3, reconcile_pulls=3, delivery_log_entries=100, seeded_rows=2000,
               seeded_databases=("postgres",))


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"po-bench-{prefix}-") as name:
        yield Path(name)


def rss_kib(pid: int) -> dict[str, int]:
    """Resident memory now (VmRSS) and at its peak so far (VmHWM), from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


class CpuSteal:
    """The share of CPU time the hypervisor took from this VM while a block ran (from /proc/stat): figures
    measured under heavy steal are noisier, so every latency table says how much there was."""

    def __enter__(self) -> CpuSteal:
        self._start = _cpu_times()
        self.percent = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        end = _cpu_times()
        total = sum(end) - sum(self._start)
        self.percent = 100.0 * (end[7] - self._start[7]) / total if total else 0.0


def _cpu_times() -> list[int]:
    first = Path("/proc/stat").read_text().splitlines()[0].split()
    return [int(value) for value in first[1:9]]


def run_loadgen(spec: dict[str, object], workdir: Path) -> dict[str, object]:
    """Run bench.loadgen in its own process and return its JSON result."""
    path = workdir / "loadgen.json"
    path.write_text(json.dumps(spec))
    output = subprocess.run([sys.executable, "-m", "bench.loadgen", str(path)], cwd=REPO_ROOT, check=True,
                            capture_output=True, text=True, timeout=600).stdout
    result: dict[str, object] = json.loads(output)
    return result
