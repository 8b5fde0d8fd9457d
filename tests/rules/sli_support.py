"""The daemon's SLI series as promtool input: a daemon's evaluation path on fake clocks
(:class:`StreamingDaemon`: an :class:`~tritonwatch.runtime.evaluator.Evaluator` over a
canary board and a stream board, its registry what ``/metrics`` shows), its rendered
SLI families (:func:`exported`), and renders taken minute by minute as promtool series
(:func:`promtool_series`), a series that left the scrape going stale as Prometheus marks it."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tritonwatch.config.schema import Config
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.runtime.histogram_bounds import slo_buckets, stream_buckets
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard

SLI_FAMILIES = (
    "tritonwatch_slo_events_total",
    "tritonwatch_slo_good_events_total",
    "tritonwatch_slo_objective_ratio",
    "tritonwatch_slo_alert_min_bad_events",
)
"""What the generic SLO rules read."""
WALL = 1_700_000_000.0
Render = dict[str, float]
"""promtool series name (``name{label="value",…}``, labels sorted) → value."""


def exported(registry: CollectorRegistry) -> Render:
    """The SLI families in ``registry``'s exposition text, as promtool series names."""
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name in SLI_FAMILIES:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}"] = float(sample.value)
    return samples


def promtool_series(renders: Sequence[Render]) -> list[dict[str, str]]:
    """One promtool input series per series seen in ``renders`` (one a minute from 0):
    its value where rendered, ``_`` before it first shows, ``stale`` at the first render
    without it (as Prometheus marks a series gone from a scrape), then ``_``."""
    keys = sorted({key for render in renders for key in render})
    series = []
    for key in keys:
        values, seen = [], False
        for render in renders:
            if key in render:
                values.append(f"{render[key]:.12g}")
                seen = True
            elif seen and values[-1] not in ("stale", "_"):
                values.append("stale")
            else:
                values.append("_")
        series.append({"series": key, "values": " ".join(values)})
    return series


class StreamingDaemon:
    """A daemon's evaluation path over ``config``, with a fake clock: the canary's and the
    streaming canary's boards (histograms laid out as the daemon lays them out) and the
    registry the daemon's ``/metrics`` renders."""

    def __init__(self, config: Config) -> None:
        self.now = 0.0
        self.canary = CanaryBoard(slo_buckets(config))
        self.streams = StreamBoard(*stream_buckets(config))
        self.registry = CollectorRegistry()
        self.evaluator = Evaluator(
            config,
            canary_board=self.canary,
            triton=TritonScrapers(),
            judged_states=list,  # nothing scraped
            registry=self.registry,
            stream_board=self.streams,
            clock=lambda: self.now,
            wall_clock=lambda: WALL + self.now,
        )
        self.evaluator.start("http://127.0.0.1:9849/metrics")

    def stream(
        self, target: str, model: str, protocol: str, ttft: float, gaps: Sequence[float]
    ) -> None:
        """One successful stream, as the streaming canary records it on both boards."""
        result = StreamResult(
            target,
            model,
            protocol,
            self.now,
            Outcome.SUCCESS,
            ttft,
            tuple(gaps),
            len(gaps) + 1,
            ttft + sum(gaps),
            None,
        )
        self.streams.record(result)
        self.canary.record(result.as_canary_result())

    def exported(self) -> Render:
        """The SLI series ``/metrics`` shows now."""
        return exported(self.registry)

    def kinds(self, model: str) -> set[str]:
        """The SLOs the daemon judges ``model`` by now."""
        return {str(s.kind) for s in self.evaluator.slo.specs if s.model == model}
