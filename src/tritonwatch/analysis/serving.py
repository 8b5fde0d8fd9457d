"""Is a server down; is a ready server serving each model? The verdicts behind
``TritonServerDown`` and ``TritonModelNotServing`` (docs/runbook.md).

Pure: readiness observations and canary series in, verdicts out, all in the daemon's
monotonic seconds. Both wait a hold, as the generated rules' ``for:`` does: a server
down :data:`HOLD_SECONDS`, a model not serving ``alerting.not_serving_for`` (the
caller's ``hold``, by default the same minute), so a Triton restart of a few seconds
raises neither: its few failures are the SLO's to count, not a page.

Triton's own health answers 200 while every inference fails (a device lost after load,
stuck execution): the readiness check cannot see that, the canary can. A model is *not
serving* when its server reads ready and every canary series of it that has produced
anything is in a run of server failures at least ``hold`` seconds old
(:attr:`~tritonwatch.state.canary_board.SeriesSnapshot.failing_since`; outcomes in
:data:`~tritonwatch.records.observations.NOT_THE_SERVERS` neither extend nor end the run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tritonwatch.records.observations import ReadinessObservation
from tritonwatch.state.canary_board import LastError, SeriesSnapshot

HOLD_SECONDS = 60.0
"""How long a server must read not ready before it pages; also the default of
``alerting.not_serving_for``, how long a model must fail every request."""


@dataclass(frozen=True, slots=True)
class ServerDown:
    """A target whose readiness check has failed for at least :data:`HOLD_SECONDS`."""

    target: str
    since: float
    """When the daemon first saw it not ready in this run (monotonic seconds)."""
    latest: ReadinessObservation


@dataclass(frozen=True, slots=True)
class NotServing:
    """A model of a ready server whose canary requests have all failed for a while."""

    target: str
    model: str
    failing_since: float
    """Start of the oldest run of failures among the model's series (monotonic seconds)."""
    failing_seconds: float
    """How long that run had lasted when the verdict was reached."""
    failed: int
    """Requests failed in a row, summed over the model's series."""
    last_error: LastError | None
    """The most recent failure of any of its series."""


def down_since(
    previous: Mapping[str, float], readiness: Mapping[str, ReadinessObservation]
) -> dict[str, float]:
    """Target → when its current run of not-ready readings was first seen: kept from
    ``previous`` while it lasts, the observation's time when it begins, gone when ready."""
    return {
        target: previous.get(target, observation.at)
        for target, observation in readiness.items()
        if not observation.ready
    }


def servers_down(
    since: Mapping[str, float],
    readiness: Mapping[str, ReadinessObservation],
    now: float,
    hold: float = HOLD_SECONDS,
) -> list[ServerDown]:
    """The targets not ready for at least ``hold`` seconds, by name."""
    return [
        ServerDown(target, since[target], readiness[target])
        for target in sorted(since)
        if target in readiness and now - since[target] >= hold
    ]


def not_serving(
    snapshots: Iterable[SeriesSnapshot],
    readiness: Mapping[str, ReadinessObservation],
    now: float,
    hold: float = HOLD_SECONDS,
) -> list[NotServing]:
    """The models of ready servers whose canary has failed every request for ``hold``
    seconds (``alerting.not_serving_for``), in the snapshots' order: none before."""
    by_model: dict[tuple[str, str], list[SeriesSnapshot]] = {}
    for snapshot in snapshots:
        if snapshot.last_outcome_at is not None:  # a series with no outcome says nothing
            by_model.setdefault((snapshot.target, snapshot.model), []).append(snapshot)
    found = []
    for (target, model), series in by_model.items():
        observation = readiness.get(target)
        if observation is None or not observation.ready:
            continue  # a server that is down is TritonServerDown's to report
        runs = [
            s.failing_since for s in series if s.failures_in_row > 0 and s.failing_since is not None
        ]
        if len(runs) < len(series) or max(runs) > now - hold:
            continue  # a series succeeded last, or has failed for less than ``hold``
        errors = [s.last_error for s in series if s.last_error is not None]
        last = max(errors, key=lambda e: e.at) if errors else None
        failed = sum(s.failures_in_row for s in series)
        oldest = min(runs)
        found.append(NotServing(target, model, oldest, now - oldest, failed, last))
    return found
