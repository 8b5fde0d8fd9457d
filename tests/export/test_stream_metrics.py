"""The streaming canary families on a real registry: promtool-clean and the right values."""

from __future__ import annotations

import pytest

from support import assert_promtool_clean, exposition, sample_value
from tritonwatch.export.stream_metrics import StreamCollector
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import latency_buckets
from tritonwatch.state.stream_board import ITL_DEFAULT_BUCKETS, StreamBoard

pytestmark = pytest.mark.real

LLM = ("trtllm", "ensemble", "http")
IDLE = ("vllm", "llama", "openai")
NOW = 1000.0


def result(
    at: float, ttft: float, gaps: tuple[float, ...], tokens: int, outcome: Outcome
) -> StreamResult:
    return StreamResult(*LLM, at, outcome, ttft, gaps, tokens, 1.0, None)


def stream_exposition(stats: StreamBoard) -> str:
    return exposition(StreamCollector(stats, clock=lambda: NOW))


@pytest.fixture
def stats() -> StreamBoard:
    """Buckets at a 500 ms TTFT and a 40 ms ITL threshold; two good streams, one failed."""
    stats = StreamBoard(
        ttft_buckets=latency_buckets([0.5]),
        itl_buckets=latency_buckets([0.04], ITL_DEFAULT_BUCKETS),
    )
    stats.declare([LLM, IDLE])
    stats.record(result(NOW - 200, 0.75, (0.01, 0.03), 3, Outcome.SUCCESS))  # 5m only
    stats.record(result(NOW - 10, 0.25, (0.04, 0.08, 0.02), 4, Outcome.SUCCESS))
    stats.record(result(NOW - 5, 0.125, (0.5,), 2, Outcome.HTTP_ERROR))  # tokens only
    return stats


def test_exposition_passes_promtool(stats: StreamBoard) -> None:
    """Histograms, counter and the quantile summary are valid exposition for promtool."""
    assert_promtool_clean(stream_exposition(stats))


def test_histograms_count_at_the_slo_thresholds(stats: StreamBoard) -> None:
    """le="0.5" (TTFT) and le="0.04" (ITL) hold the SLI exactly; failed streams are out."""
    text = stream_exposition(stats)
    key = [("target", "trtllm"), ("model", "ensemble"), ("protocol", "http")]
    ttft = "tritonwatch_canary_time_to_first_token_seconds"
    itl = "tritonwatch_canary_inter_token_latency_seconds"
    assert sample_value(text, f"{ttft}_bucket", [*key, ("le", "0.5")]) == 1
    assert sample_value(text, f"{ttft}_bucket", [*key, ("le", "+Inf")]) == 2
    assert sample_value(text, f"{ttft}_count", key) == 2
    assert sample_value(text, f"{ttft}_sum", key) == 1.0
    assert sample_value(text, f"{itl}_bucket", [*key, ("le", "0.04")]) == 4
    assert sample_value(text, f"{itl}_bucket", [*key, ("le", "0.035")]) == 3
    assert sample_value(text, f"{itl}_count", key) == 5
    assert sample_value(text, f"{itl}_sum", key) == pytest.approx(0.18)
    assert sample_value(text, "tritonwatch_canary_output_tokens_total", key) == 9


def test_quantiles_are_a_summary_per_measure_and_window(stats: StreamBoard) -> None:
    """measure × window × quantile series, with the histograms' _count/_sum per window."""
    text = stream_exposition(stats)
    assert "# TYPE tritonwatch_canary_stream_quantile_seconds summary" in text
    name = "tritonwatch_canary_stream_quantile_seconds"
    key = [("target", "trtllm"), ("model", "ensemble"), ("protocol", "http")]

    def quantile(measure: str, window: str, q: str) -> float | None:
        labels = [*key, ("measure", measure), ("window", window), ("quantile", q)]
        return sample_value(text, name, labels)

    assert quantile("ttft", "1m", "0.5") == 0.25
    assert quantile("ttft", "5m", "0.99") == 0.75
    assert quantile("itl", "1m", "0.5") == 0.04
    assert quantile("itl", "1m", "0.99") == 0.08
    assert quantile("itl", "5m", "0.5") == 0.03
    for window in ("1m", "5m"):
        labels = [*key, ("measure", "itl"), ("window", window)]
        assert sample_value(text, f"{name}_count", labels) == 5
        assert sample_value(text, f"{name}_sum", labels) == pytest.approx(0.18)


def test_an_idle_series_is_exported_at_zero_without_quantiles(stats: StreamBoard) -> None:
    """A declared stream with no sample yet has zero counts and no quantile series."""
    text = stream_exposition(stats)
    key = [("target", "vllm"), ("model", "llama"), ("protocol", "openai")]
    assert sample_value(text, "tritonwatch_canary_output_tokens_total", key) == 0
    assert sample_value(text, "tritonwatch_canary_time_to_first_token_seconds_count", key) == 0
    name = "tritonwatch_canary_stream_quantile_seconds"
    assert sample_value(text, name, key) is None
    assert sample_value(text, f"{name}_count", [*key, ("measure", "ttft"), ("window", "1m")]) == 0


def test_no_stream_declared_is_still_valid_exposition() -> None:
    """Without streaming canaries the families print no series and promtool accepts that."""
    text = stream_exposition(StreamBoard())
    assert_promtool_clean(text)
    assert sample_value(text, "tritonwatch_canary_output_tokens_total") is None
