"""When a scraper reads a model's config: on news of a change, and rarely otherwise.

A model's config is read

* when the scraper first sees the model (or its last read failed: no snapshot yet);
* when something says the model was loaded again (:func:`reloaded_models`): the
  statistics answer lists other versions than the cycle before, the model is back in it
  after a cycle without it (unloaded, or not ready, in between), or its counters went
  down — statistics belong to the loaded model, so a reload that replaces it (same
  version included) starts them from zero, and a server restart resets ``/metrics``;
* when :meth:`ConfigSchedule.mark` asked for it (whoever in the daemon loads a config
  says so, and the next cycle reads it);
* otherwise once every ``every`` cycles, as a backstop for a change nothing announced
  (an instance count changed in place keeps the statistics running). The backstop is
  spread evenly: the model at position ``i`` is read in the cycles where
  ``(cycle - 1) % every == i % every``, so a cycle reads about ``len(names) / every``
  configs, never all of them at once.

Statistics are one request a cycle for every model (``GET /v2/models/stats``) and
``/metrics`` one page, both read anyway: the news costs no extra call. A server without
the statistics API (switched off) leaves ``/metrics`` resets and the backstop.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence

from tritonwatch.records.observations import BatchStatisticsRates, ModelStatistics


def reloaded_models(
    previous: Mapping[str, ModelStatistics],
    current: Mapping[str, ModelStatistics],
    batches: Mapping[str, BatchStatisticsRates],
    *,
    missing_before: Collection[str] = (),
    metrics_reset: Collection[str] = (),
) -> set[str]:
    """The models this cycle's readings say were loaded again.

    Args:
        previous: each model's statistics the cycle before (absent: none read then).
        current: this cycle's statistics.
        batches: this cycle's statistics rates (their ``counters_reset``).
        missing_before: models whose statistics the cycle before could not read while
            the API answered (not loaded, or not ready).
        metrics_reset: models whose ``/metrics`` counters went down this cycle.
    """
    found = {name for name, rates in batches.items() if rates.counters_reset}
    found |= set(metrics_reset)
    for name, stats in current.items():
        before = previous.get(name)
        if before is not None and before.versions != stats.versions:
            found.add(name)
        if name in missing_before:
            found.add(name)
    return found


class ConfigSchedule:
    """Which models' configs one scraper reads in a cycle (see the module docstring).

    :meth:`mark` may be called from any thread; :meth:`due` only by the cycle's thread.

    Args:
        every: the backstop: each model's config is read at least once in this many
            cycles (1: every cycle).
    """

    def __init__(self, every: int) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, got: {every!r}")
        self.every = every
        self._lock = threading.Lock()
        self._marked: set[str] = set()

    def mark(self, names: Iterable[str]) -> None:
        """Has the next cycle read these models' configs."""
        with self._lock:
            self._marked.update(names)

    def due(self, cycle: int, names: Sequence[str], known: Collection[str]) -> list[str]:
        """The models of ``names`` whose config cycle ``cycle`` (1, 2, …) reads, in their
        order: those not in ``known`` (no snapshot yet), those marked (the marks of
        ``names`` are taken; others wait for the cycle that names them), and the
        backstop's share."""
        with self._lock:
            marked = self._marked & set(names)
            self._marked -= marked
        slot = (cycle - 1) % self.every
        return [
            name
            for index, name in enumerate(names)
            if name not in known or name in marked or index % self.every == slot
        ]
