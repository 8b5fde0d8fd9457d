"""Streaming canary metrics (docs/design.md §8): time to first token and inter-token
latency histograms, output tokens, and TTFT/ITL quantiles over sliding windows.

The request outcomes and the whole-stream latency of the same requests are in the
canary families (:mod:`tritonwatch.export.canary_metrics`), so nothing here repeats
them. The histograms and the quantile summary share that collector's code paths: the
same ``le``/``quantile`` label rendering and the same window-summary shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.export.canary_metrics import (
    add_window_quantiles,
    bucket_labels,
    window_quantile_summary,
)
from tritonwatch.state.stream_board import MEASURES, HistogramSnapshot, StreamBoard

TTFT_FAMILY = "tritonwatch_canary_time_to_first_token_seconds"
ITL_FAMILY = "tritonwatch_canary_inter_token_latency_seconds"
OUTPUT_TOKENS_FAMILY = "tritonwatch_canary_output_tokens"
STREAM_QUANTILE_FAMILY = "tritonwatch_canary_stream_quantile_seconds"
_LABELS = ["target", "model", "protocol"]


class StreamCollector(Collector):
    """Renders :class:`~tritonwatch.state.stream_board.StreamBoard` at scrape time."""

    def __init__(self, stats: StreamBoard, clock: Callable[[], float] = time.monotonic) -> None:
        self._stats = stats
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        snapshots = self._stats.snapshot(self._clock())
        ttft = HistogramMetricFamily(
            TTFT_FAMILY,
            "Streaming canary time to first token: from the request's origin (as the "
            "canary latency) to the first response that carries output; successful streams "
            "only, a bucket at every TTFT SLO threshold.",
            labels=_LABELS,
        )
        itl = HistogramMetricFamily(
            ITL_FAMILY,
            "Streaming canary inter-token latency: every gap between consecutive "
            "responses that carry output (one observation per gap, as vLLM's itl); "
            "successful streams only, a bucket at every ITL SLO threshold.",
            labels=_LABELS,
        )
        tokens = CounterMetricFamily(
            OUTPUT_TOKENS_FAMILY,
            "Output tokens the streaming canary received: the server's count when it "
            "reports one (OpenAI usage, vLLM num_output_tokens), else responses with output.",
            labels=_LABELS,
        )
        quantiles = window_quantile_summary(
            STREAM_QUANTILE_FAMILY,
            "Streaming canary TTFT (measure=ttft) and inter-token gap (measure=itl) "
            "quantiles over a sliding window; _count/_sum are the histograms' totals.",
        )
        ttft_buckets = bucket_labels(self._stats.ttft_buckets)
        itl_buckets = bucket_labels(self._stats.itl_buckets)
        for snap in snapshots:
            key = [snap.target, snap.model, snap.protocol]
            _add_histogram(ttft, key, ttft_buckets, snap.ttft)
            _add_histogram(itl, key, itl_buckets, snap.itl)
            tokens.add_metric(key, snap.output_tokens)
            histograms = {"ttft": snap.ttft, "itl": snap.itl}
            for measure in MEASURES:
                add_window_quantiles(
                    quantiles,
                    {**dict(zip(_LABELS, key, strict=True)), "measure": measure},
                    snap.window_quantiles[measure],
                    histograms[measure].count,
                    histograms[measure].sum,
                )
        yield ttft
        yield itl
        yield tokens
        yield quantiles


def _add_histogram(
    family: HistogramMetricFamily,
    key: list[str],
    buckets: list[str],
    histogram: HistogramSnapshot,
) -> None:
    family.add_metric(key, list(zip(buckets, histogram.bucket_counts, strict=True)), histogram.sum)
