"""Canary metrics: request outcomes, client errors (our own faults), the end-to-end
latency histogram, window quantiles, open circuit breakers, skipped canaries and
canaries whose input the model refuses."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard

QUANTILE_FAMILY = "tritonwatch_latency_quantile_seconds"
ServerQuantiles = Callable[[], Iterable[tuple[str, dict[str, str], float]]]
"""Extra ``(sample name, labels, value)`` samples of the quantile summary (source=server)."""


def label_float(value: float) -> str:
    """A float as Prometheus writes it in ``le`` and ``quantile`` labels (``0.05``, ``1.0``)."""
    return "+Inf" if value == float("inf") else repr(float(value))


def bucket_labels(buckets: Sequence[float]) -> list[str]:
    """The ``le`` labels of a histogram with these upper bounds, ``+Inf`` last."""
    return [label_float(b) for b in buckets] + ["+Inf"]


def window_quantile_summary(name: str, help_text: str) -> Metric:
    """A family of quantiles over sliding windows.

    A summary, not a gauge: a "quantile" label is reserved for summaries (promtool says
    so), and a summary is what this is — quantiles over a sliding window, with
    cumulative _count/_sum, exactly as Go clients and Triton's own summaries do.
    """
    return Metric(name, help_text, "summary")


def add_window_quantiles(
    summary: Metric,
    labels: Mapping[str, str],
    windows: Mapping[str, Mapping[float, float]],
    count: float,
    total: float,
) -> None:
    """Adds one series' quantiles per window (``window`` label) to ``summary``, with the
    series' cumulative ``_count`` and ``_sum`` beside each window's quantiles."""
    for window, values in windows.items():
        window_labels = {**labels, "window": window}
        for quantile, seconds in values.items():
            quantile_labels = {**window_labels, "quantile": label_float(quantile)}
            summary.add_sample(summary.name, quantile_labels, seconds)
        summary.add_sample(f"{summary.name}_count", window_labels, count)
        summary.add_sample(f"{summary.name}_sum", window_labels, total)


class CanaryCollector(Collector):
    """Renders :class:`CanaryBoard` at scrape time (docs/design.md §8 names).

    ``full`` says whether ``/metrics`` is at ``exporter.detail: full``: below it the
    families of that level only (the histogram, send lateness, client errors) are not
    built at all, where a thousand models would make tens of thousands of samples a
    scrape only to drop them (:mod:`~tritonwatch.export.detail`)."""

    def __init__(
        self,
        stats: CanaryBoard,
        clock: Callable[[], float] = time.monotonic,
        server_quantiles: ServerQuantiles | None = None,
        full: Callable[[], bool] = lambda: True,
    ) -> None:
        self._stats = stats
        self._clock = clock
        self._server_quantiles = server_quantiles
        self._full = full

    def collect(self) -> Iterator[Metric]:
        snapshots = self._stats.snapshot(self._clock())
        buckets = bucket_labels(self._stats.buckets)
        requests = CounterMetricFamily(
            "tritonwatch_canary_requests",
            "Canary requests sent, by how they ended.",
            labels=["target", "model", "protocol", "outcome"],
        )
        latency = HistogramMetricFamily(
            "tritonwatch_canary_latency_seconds",
            "Canary end-to-end latency from the intended send time, less the canary's own "
            "send lateness (timeouts count as the timeout); a bucket sits exactly at every "
            "SLO threshold.",
            labels=["target", "model", "protocol"],
        )
        lateness = SummaryMetricFamily(
            "tritonwatch_canary_send_lateness_seconds",
            "How late the canary's own thread took its requests up after their intended "
            "send times (the client's scheduling, kept out of the latency).",
            labels=["target", "model", "protocol"],
        )
        quantiles = window_quantile_summary(
            QUANTILE_FAMILY,
            "Latency quantiles over a sliding window; source=canary is client end to end, "
            "source=server is Triton's own summary (when the server exports summaries).",
        )
        client_errors = CounterMetricFamily(
            "tritonwatch_canary_client_errors",
            "Canary answers our own readers could not read and a library read: the "
            "daemon's fault, not the server's (left out of the availability SLO; the model's "
            "canary then sends through the library).",
            labels=["target", "model", "protocol"],
        )
        full = self._full()
        for snap in snapshots:
            for outcome, count in sorted(snap.outcomes.items()):
                requests.add_metric([snap.target, snap.model, snap.protocol, outcome], count)
            add_window_quantiles(
                quantiles,
                {"target": snap.target, "model": snap.model, "source": "canary"},
                snap.window_quantiles,
                snap.latency_count,
                snap.latency_sum,
            )
            if not full:
                continue
            client_errors.add_metric(
                [snap.target, snap.model, snap.protocol],
                snap.outcomes.get(Outcome.CLIENT_ERROR, 0),
            )
            latency.add_metric(
                [snap.target, snap.model, snap.protocol],
                list(zip(buckets, snap.bucket_counts, strict=True)),
                snap.latency_sum,
            )
            lateness.add_metric(
                [snap.target, snap.model, snap.protocol],
                snap.send_lateness_count,
                snap.send_lateness_sum,
            )
        if self._server_quantiles is not None:
            for name, labels, value in self._server_quantiles():
                quantiles.add_sample(name, labels, value)
        circuit = GaugeMetricFamily(
            "tritonwatch_canary_circuit_open",
            "1 while a canary's circuit breaker holds its load back (the target keeps failing).",
            labels=["target", "model", "protocol"],
        )
        open_circuits = self._stats.open_circuits()
        for snap in snapshots:
            key = (snap.target, snap.model, snap.protocol)
            circuit.add_metric(list(key), 1.0 if key in open_circuits else 0.0)
        skipped = GaugeMetricFamily(
            "tritonwatch_canary_skipped",
            "1 while a model's canary sends nothing because it cannot fill an input "
            "(reason: which input and why; a config reload tries again).",
            labels=["target", "model", "protocol", "reason"],
        )
        for (target, model, protocol), reason in sorted(self._stats.skipped().items()):
            skipped.add_metric([target, model, protocol, reason], 1.0)
        refused = GaugeMetricFamily(
            "tritonwatch_canary_input_refused",
            "1 while the model refuses the canary's input (HTTP 400 / INVALID_ARGUMENT, "
            "the outcome rejected, several in a row) and its canary sends one request a "
            "minute: give canary.input_data. The status page shows Triton's error.",
            labels=["target", "model", "protocol"],
        )
        refusing = self._stats.input_refused()
        for snap in snapshots:
            key = (snap.target, snap.model, snap.protocol)
            refused.add_metric(list(key), 1.0 if key in refusing else 0.0)
        asked, planned = self._stats.rates()
        total = GaugeMetricFamily(
            "tritonwatch_canary_total_rate_requests_per_second",
            "Canary requests per second over every model: asked (the models' rates after the "
            "per-target caps) and planned (after canary.max_total_rate).",
            labels=["rate"],
        )
        total.add_metric(["asked"], asked)
        total.add_metric(["planned"], planned)
        scale = GaugeMetricFamily(
            "tritonwatch_canary_rate_scale_ratio",
            "The factor every canary's rate was scaled by to fit canary.max_total_rate "
            "(1 within the budget).",
        )
        scale.add_metric([], planned / asked if asked > 0 else 1.0)
        yield total
        yield scale
        yield requests
        if full:
            yield client_errors
            yield latency
            yield lateness
        yield quantiles
        yield circuit
        yield skipped
        yield refused
