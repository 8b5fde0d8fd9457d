"""Rates of one model's LLM counters between two scrapes: preemptions and tokens per
second, and the server's mean TTFT and ITL over the interval.

The same rule as :mod:`~tritonwatch.scrape.triton_deltas`: a counter that went down
means the server restarted, and then every counter of the model counts from zero, so a
mean never divides a post-restart sum by a pre-restart count. A number either reading
lacks has no rate (None), never 0.
"""

from __future__ import annotations

from collections.abc import Iterator

from tritonwatch.records.counters import counter_increase
from tritonwatch.records.llm_records import ITL, TTFT, LlmRates, LlmReadings


def _cumulative(readings: LlmReadings) -> Iterator[tuple[str, float | None]]:
    """Every cumulative number of the readings, by a name of its own."""
    yield "preemptions", readings.preemptions_total
    yield "prompt", readings.prompt_tokens_total
    yield "generation", readings.generation_tokens_total
    for measure, histogram in readings.histograms.items():
        yield f"{measure}_sum", histogram.sum
        yield f"{measure}_count", histogram.count


def _went_down(previous: LlmReadings, current: LlmReadings) -> bool:
    before = dict(_cumulative(previous))
    return any(
        value is not None and (old := before.get(name)) is not None and value < old
        for name, value in _cumulative(current)
    )


def llm_rates(previous: LlmReadings, current: LlmReadings, interval_seconds: float) -> LlmRates:
    """The rates of one model over ``interval_seconds`` between two readings.

    Raises:
        ValueError: ``interval_seconds`` is not positive.
    """
    if not interval_seconds > 0:
        raise ValueError(f"interval_seconds must be positive, got: {interval_seconds}")
    reset = _went_down(previous, current)

    def per_second(old: float | None, new: float | None) -> float | None:
        increase = counter_increase(old, new, reset)
        return None if increase is None else increase / interval_seconds

    def mean(measure: str) -> float | None:
        old, new = previous.histograms.get(measure), current.histograms.get(measure)
        if old is None or new is None:
            return None
        count = counter_increase(old.count, new.count, reset)
        total = counter_increase(old.sum, new.sum, reset)
        if not count or total is None:
            return None
        return total / count

    return LlmRates(
        interval_seconds=interval_seconds,
        preemptions_per_second=per_second(previous.preemptions_total, current.preemptions_total),
        prompt_tokens_per_second=per_second(
            previous.prompt_tokens_total, current.prompt_tokens_total
        ),
        generation_tokens_per_second=per_second(
            previous.generation_tokens_total, current.generation_tokens_total
        ),
        ttft_mean_seconds=mean(TTFT),
        itl_mean_seconds=mean(ITL),
        counters_reset=reset,
    )
