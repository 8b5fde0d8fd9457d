"""The load's trend (least squares, as ``predict_linear``) and the exhaustion ticket's
held condition: exact on lines, the same fit as numpy's, quiet on a noisy flat load,
and early on a rising one."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tritonwatch.analysis.load_trend import Trend, exhaustion_seconds, fit_trend
from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.export.capacity_alerts import firing, held_since
from tritonwatch.records.capacity_records import CapacityReading, SweptCapacity

CAPACITY = 100.0
SCRAPE = 15.0


def test_the_fit_is_numpys_least_squares_valued_at_the_evaluation_time() -> None:
    """Fails if the line is not the ordinary least-squares one, or is valued at the last
    sample instead of at ``now`` (predict_linear's intercept is at the evaluation time)."""
    draw = random.Random(7)
    samples = [
        (t * 15.0 + draw.random(), 50 + 0.01 * t * 15 + draw.gauss(0, 3)) for t in range(200)
    ]
    now = samples[-1][0] + 20.0
    trend = fit_trend(samples, now)
    slope, intercept = np.polyfit([t for t, _ in samples], [v for _, v in samples], 1)
    assert trend is not None
    assert trend.slope == pytest.approx(slope, rel=1e-9)
    assert trend.value_now == pytest.approx(intercept + slope * now, rel=1e-9)
    assert trend.predict(3600) == pytest.approx(intercept + slope * (now + 3600), rel=1e-9)


def test_no_trend_from_one_sample_or_one_instant() -> None:
    """Fails if a slope is made up from a single point in time."""
    assert fit_trend([(1.0, 5.0)], 2.0) is None
    assert fit_trend([(1.0, 5.0), (1.0, 6.0)], 2.0) is None


@pytest.mark.parametrize(
    ("trend", "seconds"),
    [
        (Trend(value_now=60.0, slope=0.01), 4000.0),  # 40 left at 0.01/s
        (Trend(value_now=100.0, slope=0.5), 0.0),  # at capacity already
        (Trend(value_now=120.0, slope=-1.0), 0.0),  # past it, falling: still full now
        (Trend(value_now=60.0, slope=0.0), math.inf),
        (Trend(value_now=60.0, slope=-0.01), math.inf),
    ],
)
def test_exhaustion_is_when_the_line_reaches_capacity(trend: Trend, seconds: float) -> None:
    """Fails if the time to exhaustion is off the line, or not 0 / +Inf at the ends."""
    assert exhaustion_seconds(trend, CAPACITY) == pytest.approx(seconds)


def _reading(
    samples: list[tuple[float, float]], now: float, settings: CapacityConfig
) -> CapacityReading:
    """What the capacity board reads at ``now`` from the load samples of the trend window."""
    window = [(t, v) for t, v in samples if now - settings.trend_window <= t <= now]
    trend = fit_trend(window, now)
    assert trend is not None
    return CapacityReading(
        target="t",
        model="m",
        service="t",
        capacity=SweptCapacity(CAPACITY, None, False, 0.0),
        load=window[-1][1],
        canary_load=1.0,
        slope=trend.slope,
        forecast=trend.predict(settings.forecast_horizon),
        exhaustion_seconds=exhaustion_seconds(trend, CAPACITY),
    )


def _first_firing(
    samples: list[tuple[float, float]], settings: CapacityConfig, every: float
) -> float | None:
    """Evaluates the held condition every ``every`` seconds over the samples (as the
    evaluator does); the first time the ticket fires, or None."""
    since: dict[tuple[str, str], float] = {}
    now = samples[0][0] + 2 * every
    while now <= samples[-1][0]:
        reading = _reading(samples, now, settings)
        since = held_since(since, [reading], settings, now)
        if firing(since, [reading], settings, now):
            return now
        now += every
    return None


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_flat_load_near_the_threshold_never_fires(seed: int) -> None:
    """Fails if six hours of a flat load at 85 % of capacity, with noise of 5 % of
    capacity on every scrape, raise the ticket (the forecast's slope error is ~0.3 % of
    capacity an hour on the default 1 h window: 3σ short of 'full in 4 h')."""
    draw = random.Random(seed)
    samples = [(i * SCRAPE, 85.0 + draw.gauss(0, 5.0)) for i in range(int(6 * 3600 / SCRAPE))]
    assert _first_firing(samples, CapacityConfig(), every=SCRAPE) is None


def test_a_steady_rise_fires_before_the_load_reaches_capacity() -> None:
    """Fails if a load rising steadily from 40 % to 120 % of capacity over eight hours
    (noise 3 %) raises no ticket, or raises it only once the load is at capacity."""
    draw = random.Random(3)
    hours = 8
    count = int(hours * 3600 / SCRAPE)
    samples = [(i * SCRAPE, 40 + 80 * i / count + draw.gauss(0, 3.0)) for i in range(count)]
    fired = _first_firing(samples, CapacityConfig(), every=SCRAPE)
    assert fired is not None
    full_at = (CAPACITY - 40) / 80 * hours * 3600  # 6 h: the noiseless line reaches capacity
    # Headroom under 20 % from 80 % load (4 h in); the raw load's noise restarts the
    # 15 m hold while it crosses, as it restarts a rule's `for:`: before 5 h 30 m, not 6 h.
    assert 4 * 3600 + 15 * 60 <= fired <= 5.5 * 3600, fired
    assert fired < full_at
