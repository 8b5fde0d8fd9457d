"""Exact quantiles over small samples, the way perf_analyzer reports percentiles.

The canary sends a few requests per second, so a 5-minute window holds hundreds of
samples, not millions: exact order statistics are cheap and need no sketch error
bars. The nearest-rank definition (perf_analyzer's) never invents a latency that
no request had.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99)


def nearest_rank(sorted_values: Sequence[float], quantile: float) -> float:
    """The ``quantile`` (0 < q ≤ 1) of already-sorted values by the nearest-rank rule.

    Raises:
        ValueError: on an empty sequence or a quantile outside (0, 1].
    """
    if not sorted_values:
        raise ValueError("no values")
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got: {quantile}")
    rank = math.ceil(quantile * len(sorted_values))
    return sorted_values[max(rank, 1) - 1]


def quantiles(
    values: Sequence[float], qs: Sequence[float] = DEFAULT_QUANTILES
) -> dict[float, float]:
    """Several quantiles of unsorted ``values`` with one sort; empty input gives ``{}``."""
    if not values:
        return {}
    ordered = sorted(values)
    return {q: nearest_rank(ordered, q) for q in qs}
