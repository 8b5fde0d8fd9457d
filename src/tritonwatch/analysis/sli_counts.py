"""The canary's SLI events as cumulative counts: how many events each SLO had and how
many were good, since the canary's counters began.

One definition of an event, read by the in-process SLO tracker (as increases between
snapshots) and by the exported ``tritonwatch_slo_events_total`` /
``tritonwatch_slo_good_events_total`` (as counters, for the shipped generic rules):

* availability: every canary outcome but those of
  :data:`~tritonwatch.records.observations.NOT_THE_SERVERS` (our own client's faults);
  good = ``success``;
* latency, TTFT, ITL: every observation of the canary's histogram (latency: every
  request, timeouts at the timeout; TTFT: one per successful stream; ITL: one per gap
  between tokens); good = the cumulative bucket at ``le = threshold`` (the histograms
  carry a bound at every threshold).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tritonwatch.analysis.slo import SLOKind, SLOSpec
from tritonwatch.records.observations import NOT_THE_SERVERS, Outcome
from tritonwatch.state.canary_board import SeriesSnapshot
from tritonwatch.state.stream_board import StreamSnapshot


def bucket_index(bounds: Sequence[float], threshold: float) -> int | None:
    """Where ``threshold`` sits among a histogram's upper bounds (None: not a bound)."""
    for index, bound in enumerate(bounds):
        if math.isclose(bound, threshold, rel_tol=1e-9):
            return index
    return None


def availability_counts(outcomes: Mapping[str, int]) -> tuple[float, float]:
    """(events, good) of the availability SLI from a canary series' outcome counts."""
    events = sum(n for outcome, n in outcomes.items() if outcome not in NOT_THE_SERVERS)
    return float(events), float(outcomes.get(Outcome.SUCCESS, 0))


def threshold_counts(
    bounds: Sequence[float], buckets: Sequence[int], count: float, threshold: float
) -> tuple[float, float] | None:
    """(events, good) of a threshold SLI from a histogram's cumulative ``buckets``
    (``+Inf`` last) over ``bounds``; None when ``threshold`` is not one of the bounds."""
    index = bucket_index(bounds, threshold)
    if index is None or len(buckets) != len(bounds) + 1:
        return None
    return float(count), float(buckets[index])


@dataclass(frozen=True, slots=True)
class SliCount:
    """One SLO's events since the canary's counters began, over every protocol."""

    target: str
    model: str
    slo: SLOKind
    events: float
    good: float


@dataclass(frozen=True, slots=True)
class CanaryHistograms:
    """What the SLI counts read: the canary's and the streaming canary's series and the
    bounds of their histograms."""

    canary: Sequence[SeriesSnapshot]
    latency_bounds: Sequence[float]
    streams: Sequence[StreamSnapshot] = ()
    ttft_bounds: Sequence[float] = ()
    itl_bounds: Sequence[float] = ()


def sli_counts(specs: Iterable[SLOSpec], seen: CanaryHistograms) -> list[SliCount]:
    """The events of every SLO in ``specs`` that has a canary series, summed over the
    model's protocols, in the order of ``specs``. An SLO whose threshold is not a bound of
    its histogram has no count (the tracker logs it)."""
    totals: dict[tuple[str, str, SLOKind], tuple[float, float]] = {}

    def add(key: tuple[str, str, SLOKind], counts: tuple[float, float] | None) -> None:
        if counts is not None:
            events, good = totals.get(key, (0.0, 0.0))
            totals[key] = (events + counts[0], good + counts[1])

    wanted = {(s.target, s.model, s.kind): s for s in specs}
    for snap in seen.canary:
        key = (snap.target, snap.model, SLOKind.AVAILABILITY)
        if key in wanted:
            add(key, availability_counts(snap.outcomes))
        latency = wanted.get((snap.target, snap.model, SLOKind.LATENCY))
        if latency is not None and latency.threshold_seconds is not None:
            counts = threshold_counts(
                seen.latency_bounds,
                snap.bucket_counts,
                snap.latency_count,
                latency.threshold_seconds,
            )
            add((snap.target, snap.model, SLOKind.LATENCY), counts)
    for stream in seen.streams:
        measures = (
            (SLOKind.TTFT, stream.ttft, seen.ttft_bounds),
            (SLOKind.ITL, stream.itl, seen.itl_bounds),
        )
        for kind, histogram, bounds in measures:
            spec = wanted.get((stream.target, stream.model, kind))
            if spec is not None and spec.threshold_seconds is not None:
                counts = threshold_counts(
                    bounds, histogram.bucket_counts, histogram.count, spec.threshold_seconds
                )
                add((stream.target, stream.model, kind), counts)
    return [
        SliCount(target, model, kind, *totals[(target, model, kind)])
        for target, model, kind in wanted
        if (target, model, kind) in totals
    ]
