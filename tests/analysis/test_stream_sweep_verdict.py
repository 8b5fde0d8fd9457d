"""A streaming sweep is judged on output tokens/s and the p95 of its --measure (TTFT or
ITL), not on requests/s and whole-stream latency."""

from __future__ import annotations

from sweep_support import judged, stream_step
from tritonwatch.records.sweep_records import Measure, StepResult, SweepSettings

LEVELS = (1, 2, 4, 8, 16)
TOKENS_PER_SECOND = (100.0, 200.0, 400.0, 420.0, 425.0)
"""Flat past 4: 4 -> 8 buys 5 tokens/s per stream, under 10 % of the 100 at level 1."""
REQUESTS_PER_SECOND = (10.0, 20.0, 40.0, 80.0, 160.0)
"""Never flattens: a knee found on requests/s would not be reached."""
ITL_P95 = (0.005, 0.005, 0.006, 0.020, 0.040)
TTFT_P95 = (0.030, 0.300, 0.600, 0.700, 0.800)
LATENCY_P95 = 1.0
"""Every stream takes a second: a budget judged on it would find no operating point."""


def _step(index: int) -> StepResult:
    return stream_step(LEVELS[index], tokens_per_second=TOKENS_PER_SECOND[index],
                       requests_per_second=REQUESTS_PER_SECOND[index],
                       ttft_p95=TTFT_P95[index], itl_p95=ITL_P95[index],
                       latency_p95=LATENCY_P95)  # fmt: skip


def _judge(measure: Measure, budget: float) -> tuple[float | None, float | None, bool | None]:
    settings = SweepSettings(url="http://127.0.0.1:1", model="llm", levels=LEVELS,
                             measure=measure, budget_p95=budget)  # fmt: skip
    result = judged(settings, [_step(i) for i in range(len(LEVELS))])
    knee, point = result.knee, result.operating_point
    assert knee is not None
    return knee.concurrency, point.level if point else None, knee.reached


def test_the_knee_is_found_on_output_tokens_per_second() -> None:
    """Breaks if a streaming sweep's knee is found on requests/s (never flat here)."""
    settings = SweepSettings(url="http://127.0.0.1:1", model="llm", levels=LEVELS,
                             measure="itl")  # fmt: skip
    result = judged(settings, [_step(i) for i in range(len(LEVELS))])
    assert result.knee is not None
    assert (result.knee.concurrency, result.knee.throughput, result.knee.reached) == (4, 400, True)


def test_the_operating_point_is_judged_on_itl_when_measure_is_itl() -> None:
    """Breaks if the ITL budget is read from TTFT or whole-stream latency: within 10 ms
    ITL, level 4 serves the most tokens (TTFT and latency are far over 10 ms)."""
    assert _judge("itl", 0.010) == (4, 4, True)
    assert _judge("itl", 0.030) == (4, 8, True)  # 16 is over it; 8 serves 5 % more than 4
    assert _judge("itl", 0.001) == (4, None, True)


def test_the_operating_point_is_judged_on_ttft_when_measure_is_ttft() -> None:
    """Breaks if the TTFT budget is read from ITL: within 350 ms TTFT only levels 1 and 2."""
    assert _judge("ttft", 0.350) == (4, 2, True)
