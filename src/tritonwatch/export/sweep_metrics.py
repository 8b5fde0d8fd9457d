"""The last scheduled sweep per model: the curve, its knee and operating point."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.records.sweep_records import SweepBoard

_LATENCY = "tritonwatch_sweep_latency_seconds"
_QUANTILES = (("p50", "0.5"), ("p90", "0.9"), ("p95", "0.95"), ("p99", "0.99"))


class SweepCollector(Collector):
    """Renders :class:`SweepBoard` (docs/design.md §8 ``tritonwatch_sweep_*``)."""

    def __init__(self, board: SweepBoard) -> None:
        self._board = board

    def collect(self) -> Iterator[Metric]:
        throughput = GaugeMetricFamily(
            "tritonwatch_sweep_throughput_inferences_per_second",
            "Throughput measured at each concurrency of the last sweep.",
            labels=["target", "model", "concurrency"],
        )
        # A summary: the step's quantiles with the step's request count and latency sum
        # (promtool reserves the "quantile" label for summaries).
        latency = Metric(
            _LATENCY, "Latency quantiles measured at each concurrency of the last sweep.", "summary"
        )
        knee = GaugeMetricFamily(
            "tritonwatch_sweep_knee_concurrency",
            "Concurrency at the knee of the last sweep's throughput curve.",
            labels=["target", "model"],
        )
        operating = GaugeMetricFamily(
            "tritonwatch_sweep_operating_point_concurrency",
            "Concurrency with the best throughput inside the p95 budget in the last sweep.",
            labels=["target", "model"],
        )
        finished = GaugeMetricFamily(
            "tritonwatch_sweep_last_run_timestamp_seconds",
            "Unix time the last sweep of the model finished.",
            labels=["target", "model"],
        )
        for (target, model), (result, at) in sorted(self._board.snapshot().items()):
            for step in result.steps:
                level = f"{step.level:g}"
                throughput.add_metric([target, model, level], step.inferences_per_second)
                labels = {"target": target, "model": model, "concurrency": level}
                for key, quantile in _QUANTILES:
                    latency.add_sample(
                        _LATENCY, {**labels, "quantile": quantile}, step.latency[key]
                    )
                latency.add_sample(f"{_LATENCY}_count", labels, step.requests)
                latency.add_sample(f"{_LATENCY}_sum", labels, step.latency["avg"] * step.requests)
            if result.knee is not None:
                knee.add_metric([target, model], result.knee.concurrency)
            if result.operating_point is not None:
                operating.add_metric([target, model], result.operating_point.level)
            finished.add_metric([target, model], at)
        yield from (throughput, latency, knee, operating, finished)
