"""Every target's scraped state with the judgement's breakdown and bottleneck added.

The scrape publishes readings only (:class:`~tritonwatch.records.target_state.TargetState`);
what limits a model's latency is judgement (:mod:`tritonwatch.analysis.breakdown`),
so it is added here, in the wiring, from the config's thresholds. A judged state is
cached by the identity of the scraped state it came from: readers (the exporter, the
status page) judge each scrape once, whoever asks first, and always see a state whose
verdicts match its readings. :meth:`BottleneckBoard.observe`, called after each scrape,
logs a model's bottleneck changing kind.
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
    """Judged states of every target, read through from ``scraped`` (the scrapers' states).

    Args:
        scraped: returns every target's latest scraped state, sorted by target.
    """

    def __init__(self, scraped: Callable[[], list[TargetState]]) -> None:
        self._scraped = scraped
        self._lock = threading.Lock()
        self._thresholds: dict[str, dict[str, BottleneckThresholds]] = {}
        self._judged: dict[str, tuple[TargetState, TargetState]] = {}
        self._kinds: dict[tuple[str, str], BottleneckKind] = {}

    def apply(self, config: Config) -> None:
        """Each target's thresholds from its models' latency budgets; verdicts of a
        target whose thresholds changed are judged again on the next read."""
        thresholds = {t.name: bottleneck_thresholds(config, t) for t in config.targets}
        with self._lock:
            self._judged = {
                target: entry
                for target, entry in self._judged.items()
                if self._thresholds.get(target) == thresholds.get(target)
            }
            self._thresholds = thresholds
            self._kinds = {
                key: kind
                for key, kind in self._kinds.items()
                if key[1] in thresholds.get(key[0], {})
            }

    def states(self) -> list[TargetState]:
        """Every target's latest state, judged."""
        return [self._judge(state) for state in self._scraped()]

    def observe(self, target: str) -> None:
        """After ``target``'s scrape: logs each model whose bottleneck changed kind."""
        scraped = next((s for s in self._scraped() if s.target == target), None)
        if scraped is None:
            return
        state = self._judge(scraped)  # this target only: the others did not change
        for name, model in state.models.items():
            if model.bottleneck is None:
                continue
            key = (target, name)
            with self._lock:
                previous, self._kinds[key] = self._kinds.get(key), model.bottleneck.kind
            if previous != model.bottleneck.kind:
                _log.info(
                    "bottleneck_changed",
                    target=target,
                    model=name,
                    kind=model.bottleneck.kind,
                    previous=previous,
                    shares={stage: round(v, 4) for stage, v in model.bottleneck.shares.items()},
                    reason=model.bottleneck.reason,
                )

    def _judge(self, scraped: TargetState) -> TargetState:
        with self._lock:
            entry = self._judged.get(scraped.target)
            thresholds = self._thresholds.get(scraped.target)
        if entry is not None and entry[0] is scraped:
            return entry[1]
        judged = judge_target(scraped, thresholds)
        with self._lock:
            self._judged[scraped.target] = (scraped, judged)
        return judged
