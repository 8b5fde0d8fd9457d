"""Every target's scraped state with the judgement's breakdown and bottleneck added.

The scrape publishes readings only (:class:`~tritonwatch.records.target_state.TargetState`);
what limits a model's latency is judgement (:mod:`tritonwatch.analysis.breakdown`),
so it is added here, in the wiring, from the thresholds of the config in force.

Judged once, on write, never on read: the scrape job calls :meth:`BottleneckBoard.publish`
right after each scrape cycle, which judges that target's new state once and keeps it;
a reload's :meth:`BottleneckBoard.apply` re-judges every target's latest state at once
under the new thresholds (it does not wait for the next scrape). Every reader — the
exporter's collectors, the evaluator (its bottleneck verdicts and the advisor's inputs)
and the status page — reads :meth:`BottleneckBoard.states`, the very objects judged,
so all of them see one verdict per scrape. :meth:`~BottleneckBoard.publish` also logs a
model's bottleneck changing kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tritonwatch.analysis.breakdown import BottleneckThresholds, bottleneck_thresholds, judge_target
from tritonwatch.common.logs import get_logger
from tritonwatch.config.schema import Config
from tritonwatch.records.target_state import BottleneckKind, TargetState

_log = get_logger("scrape")


class BottleneckBoard:
    """The judged state of every target, judged when a scrape or a reload writes it.

    Args:
        scraped: returns every target's latest scraped state, sorted by target (the
            scrapers' :meth:`~tritonwatch.scrape.triton_scrapers.TritonScrapers.states`).

    Thread-safe: writers (:meth:`apply`, :meth:`publish`) judge one at a time, so a
    scrape's verdict never overwrites a reload's with the old thresholds; readers only
    take the latest judged states and never wait for a judgement.
    """

    def __init__(self, scraped: Callable[[], list[TargetState]]) -> None:
        self._scraped = scraped
        self._writing = threading.Lock()
        """Held by the writers across reading the scraped state, judging and storing."""
        self._lock = threading.Lock()
        self._thresholds: dict[str, dict[str, BottleneckThresholds]] = {}
        self._states: dict[str, TargetState] = {}
        self._kinds: dict[tuple[str, str], BottleneckKind] = {}

    def apply(self, config: Config) -> None:
        """Each target's thresholds from its models' latency budgets (``config``: the
        effective config in force, after the scrapers were applied): every target's
        latest scraped state is judged again now with them, a target no longer scraped
        is dropped, and so are the logged kinds of models no longer watched."""
        thresholds = {t.name: bottleneck_thresholds(config, t) for t in config.targets}
        with self._writing:
            judged = {s.target: judge_target(s, thresholds.get(s.target)) for s in self._scraped()}
            with self._lock:
                self._thresholds = thresholds
                self._states = judged
                self._kinds = {
                    key: kind
                    for key, kind in self._kinds.items()
                    if key[1] in thresholds.get(key[0], {})
                }

    def publish(self, target: str) -> TargetState | None:
        """After ``target``'s scrape cycle: judges its latest scraped state once, keeps it
        for every reader, and logs each model whose bottleneck changed kind. Returns the
        judged state; None for a target no longer scraped (a job that outlived a reload)."""
        with self._writing:
            scraped = next((s for s in self._scraped() if s.target == target), None)
            if scraped is None:
                return None
            with self._lock:
                thresholds = self._thresholds.get(target)
            state = judge_target(scraped, thresholds)
            with self._lock:
                self._states[target] = state
                changed = self._changed_kinds(state)
        for name, previous in changed:
            bottleneck = state.models[name].bottleneck
            assert bottleneck is not None  # only models with a verdict change kind
            _log.info(
                "bottleneck_changed",
                target=target,
                model=name,
                kind=bottleneck.kind,
                previous=previous,
                shares={stage: round(v, 4) for stage, v in bottleneck.shares.items()},
                reason=bottleneck.reason,
            )
        return state

    def states(self) -> list[TargetState]:
        """Every target's latest judged state, sorted by target; judges nothing."""
        with self._lock:
            return sorted(self._states.values(), key=lambda s: s.target)

    def _changed_kinds(self, state: TargetState) -> list[tuple[str, BottleneckKind | None]]:
        """Records each model's bottleneck kind (under ``_lock``); returns the models
        whose kind changed, with the previous kind."""
        changed: list[tuple[str, BottleneckKind | None]] = []
        for name, model in state.models.items():
            if model.bottleneck is None:
                continue
            key = (state.target, name)
            previous, self._kinds[key] = self._kinds.get(key), model.bottleneck.kind
            if previous != model.bottleneck.kind:
                changed.append((name, previous))
        return changed
