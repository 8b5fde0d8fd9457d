"""Counter arithmetic shared by the sources and the judgement: Prometheus' ``rate()``
rule for how much a cumulative counter grew between two readings.

Neutral on purpose: the scrape turns Triton's counters into rates with it and the SLO
tracker counts canary events with it; neither may import the other (docs/architecture.md).
"""

from __future__ import annotations

import math


def counter_increase(previous: float | None, current: float | None, reset: bool) -> float | None:
    """How much a counter grew; its new value after a reset; None when either is unknown."""
    if previous is None or current is None:
        return None
    if not (math.isfinite(previous) and math.isfinite(current)):
        return None
    if reset or current < previous:
        return current
    return current - previous
