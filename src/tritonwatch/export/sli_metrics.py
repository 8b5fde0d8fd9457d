"""SLI event counters (docs/design.md §6): per model and SLO, how many events the canary
counted and how many were good, plus each SLO's minimum-events gate — what the shipped
generic rules need to judge every model without a list of models.

Counted as the in-process tracker counts them (:mod:`tritonwatch.analysis.sli_counts`),
since the canary's counters began: a daemon restart, or a reload that changes a
histogram's bounds, starts them again from 0, which ``rate()`` reads as a counter reset.
An SLO the daemon does not judge (a latency SLO of a model found to stream) has no series.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tritonwatch.analysis.sli_counts import CanaryHistograms, sli_counts
from tritonwatch.analysis.slo import SLOSpec
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard

LABELS = ["target", "model", "slo"]


class SLIEventsCollector(Collector):
    """Renders :func:`sli_counts` of the boards' latest counts at scrape time.

    Args:
        specs: the SLOs the daemon judges now (the tracker's).
        canary: the canary's counters and histograms.
        streams: the streaming canary's (None: no streaming SLIs).
        clock: the boards' monotonic clock.
    """

    def __init__(
        self,
        specs: Callable[[], Sequence[SLOSpec]],
        canary: CanaryBoard,
        streams: StreamBoard | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._specs = specs
        self._canary = canary
        self._streams = streams
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        streams = self._streams
        seen = CanaryHistograms(
            self._canary.snapshot(now, quantiles=False),
            self._canary.buckets,
            streams.snapshot(now) if streams is not None else (),  # few: streamed models
            streams.ttft_buckets if streams is not None else (),
            streams.itl_buckets if streams is not None else (),
        )
        specs = self._specs()
        events = CounterMetricFamily(
            "tritonwatch_slo_events",
            "The SLO's events the canary counted (its SLI's denominator): availability, "
            "every request but our own client's faults; latency, every request; TTFT, every "
            "successful stream; ITL, every gap between tokens.",
            labels=LABELS,
        )
        good = CounterMetricFamily(
            "tritonwatch_slo_good_events",
            "The SLO's good events: availability, successes; latency, TTFT and ITL, those "
            "within the SLO's threshold.",
            labels=LABELS,
        )
        for count in sli_counts(specs, seen):
            labels = [count.target, count.model, str(count.slo)]
            events.add_metric(labels, count.events)
            good.add_metric(labels, count.good)
        gate = GaugeMetricFamily(
            "tritonwatch_slo_alert_min_bad_events",
            "slo.alert_min_bad_events: a burn alert also needs enough events in its long "
            "window that this many bad events alone stay under its limit (0: no gate).",
            labels=LABELS,
        )
        for spec in specs:
            gate.add_metric([spec.target, spec.model, str(spec.kind)], spec.min_bad_events)
        yield events
        yield good
        yield gate
