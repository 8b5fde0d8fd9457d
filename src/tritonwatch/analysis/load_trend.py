"""A load's trend and when it reaches capacity: least squares, as Prometheus's
``predict_linear``.

Why least squares and not double exponential smoothing (Holt): the generated alert rule
evaluates the same forecast in Prometheus, and ``predict_linear`` is there on every
server, while ``double_exponential_smoothing`` (``holt_winters`` before 3.0) needs an
experimental feature flag and two smoothing factors tuned per load. Least squares over a
window also has a noise figure one can reason about: with ``n`` samples evenly spread
over a window ``W``, the slope's standard error is ``σ·√(12/n)/W``; for the defaults
(1 h, a sample per 15 s scrape) a load whose noise is 5 % of capacity gives a slope
error of 0.3 % of capacity per hour — a flat load at 85 % would need a noise 3σ out
to read as full within 4 h, and for the whole ``alert_for`` hold at that.
Holt reacts faster to a new trend, which here is worth less than not crying wolf: the
ticket is a planning signal, the SLO pages when it is already too late.

The fit follows ``predict_linear`` exactly: the line through the window's samples by
ordinary least squares, its value taken at the evaluation time (not at the last
sample), so the daemon and the rule forecast the same from the same samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Trend:
    """A fitted line: its value at the evaluation time and its slope (per second)."""

    value_now: float
    slope: float

    def predict(self, seconds_ahead: float) -> float:
        """The line's value ``seconds_ahead`` after the evaluation time
        (``predict_linear(v[window], seconds_ahead)``)."""
        return self.value_now + self.slope * seconds_ahead


def fit_trend(samples: Sequence[tuple[float, float]], now: float) -> Trend | None:
    """The least-squares line through ``samples`` (``(time, value)``), valued at ``now``.

    None with fewer than two samples or all at one time (no slope to fit), as
    ``predict_linear`` returns nothing for a series with one point.
    """
    if len(samples) < 2:
        return None
    count = len(samples)
    mean_t = sum(t for t, _ in samples) / count
    mean_v = sum(v for _, v in samples) / count
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread <= 0:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread
    return Trend(mean_v + slope * (now - mean_t), slope)


def exhaustion_seconds(trend: Trend, capacity: float) -> float:
    """Seconds from the evaluation time until the trend reaches ``capacity``: 0 when it
    is there already, ``+inf`` when it is flat or falling.

    Raises:
        ValueError: ``capacity`` is not positive.
    """
    if not capacity > 0:
        raise ValueError(f"capacity must be positive, got: {capacity}")
    if trend.value_now >= capacity:
        return 0.0
    if trend.slope <= 0:
        return math.inf
    return (capacity - trend.value_now) / trend.slope
