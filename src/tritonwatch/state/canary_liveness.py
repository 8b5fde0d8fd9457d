"""Which canaries have gone silent: the watcher must never look away without saying so.

A canary owes an outcome about once per interval (success, failure or timeout: a hung
server still yields timeouts). One that has produced nothing for longer than it may
(:meth:`~tritonwatch.probe.canary.model_canary.ModelCanary.silence_allowed`: three intervals, a
breaker's probe period while its breaker is open, plus one timeout) is *stalled*: the
fault is the daemon's own (a dead thread, a wedged loop), and without this its model's
SLOs would simply stop burning. Canaries not yet sending (waiting for the model's
metadata from a server that is down: the readiness alert speaks for that), paused
ones (a sweep of the model runs) and skipped ones are not judged; a resumed one is
judged from its resume (its ``sending_since`` is the later of its start and the model's
last resume: probe/canary/pauses.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from tritonwatch.state.canary_board import SeriesKey, SeriesSnapshot


class WatchedCanary(Protocol):
    """What liveness reads of a running canary (on the evaluation's thread: it writes
    none of it)."""

    @property
    def paused(self) -> bool: ...

    @property
    def sending_since(self) -> float | None: ...

    def silence_allowed(self) -> float: ...


def silent_for(canary: WatchedCanary, snapshot: SeriesSnapshot | None, now: float) -> float | None:
    """Seconds since the canary's last outcome (or since it began sending, if it has
    none yet); None when it is not judged (not sending, or paused)."""
    if canary.sending_since is None or canary.paused:
        return None
    last = None if snapshot is None else snapshot.last_outcome_at
    since = canary.sending_since if last is None else max(last, canary.sending_since)
    return max(0.0, now - since)


def stalled_canaries(
    canaries: Mapping[SeriesKey, WatchedCanary],
    snapshots: Iterable[SeriesSnapshot],
    now: float,
) -> dict[SeriesKey, bool]:
    """Every running canary's verdict (True: stalled), by series key."""
    by_key = {(s.target, s.model, s.protocol): s for s in snapshots}
    verdicts = {}
    for key, canary in canaries.items():
        silent = silent_for(canary, by_key.get(key), now)
        verdicts[key] = silent is not None and silent > canary.silence_allowed()
    return verdicts
