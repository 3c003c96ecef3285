"""Percentiles and medians for the benchmark tables."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is a latency that really happened)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": percentile(seconds, 0.50) * 1000, "p99_ms": percentile(seconds, 0.99) * 1000,
            "max_ms": max(seconds) * 1000 if seconds else math.nan}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan
