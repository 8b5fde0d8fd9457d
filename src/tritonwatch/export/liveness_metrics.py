"""The canaries' liveness as metrics: which are stalled, how often the engine restarted.

Read at scrape time (STYLE: values read at scrape time go through ``collect()``), so a
canary removed by a reload takes its series with it. ``TritonwatchCanaryStalled`` (the
generated rules) fires on the gauge; a daemon that exports nothing at all is
``TritonwatchAbsent``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.state.canary_board import SeriesKey

STALLED = "tritonwatch_canary_stalled"
ENGINE_RESTARTS = "tritonwatch_canary_engine_restarts"


class LivenessCollector(Collector):
    """``tritonwatch_canary_stalled{target,model,protocol}`` and
    ``tritonwatch_canary_engine_restarts_total``."""

    def __init__(
        self, stalled: Callable[[], Mapping[SeriesKey, bool]], restarts: Callable[[], int]
    ) -> None:
        self._stalled = stalled
        self._restarts = restarts

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            STALLED,
            "1 while the canary has produced no outcome for three of its intervals plus its "
            "timeout (the daemon's own fault: its model is not being watched), else 0.",
            labels=["target", "model", "protocol"],
        )
        for (target, model, protocol), stalled in sorted(self._stalled().items()):
            gauge.add_metric([target, model, protocol], 1.0 if stalled else 0.0)
        yield gauge
        restarts = CounterMetricFamily(
            ENGINE_RESTARTS,
            "Times the canary engine's loop crashed and was restarted (each with a "
            "canary_engine_crashed log line and its traceback).",
        )
        restarts.add_metric([], float(self._restarts()))
        yield restarts
