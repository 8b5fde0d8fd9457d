"""The active recommendations of every model, between evaluations.

The advisor (:func:`~tritonwatch.analysis.advisor.advise`) judges one evaluation; the
board remembers what is active for each model — and, for a burning, bottlenecked model
with no safe change, why (:mod:`~tritonwatch.analysis.advice_blocked`) — logs a line only
when either appears, changes or clears, and is what the exporter, the status page and
the alert board read. Thread-safe: written by the evaluation job, read by the exporter's threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

from tritonwatch.analysis.advisor_records import Action, Recommendation
from tritonwatch.analysis.advisor_rules import RULES
from tritonwatch.common.logs import get_logger

_log = get_logger("advisor")

RecommendationKey = tuple[str, str, Action]
"""(target, model, action)."""


def _key(recommendation: Recommendation) -> RecommendationKey:
    return (recommendation.target, recommendation.model, recommendation.action)


class RecommendationBoard:
    """The active recommendations of every model, with one log line per change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[RecommendationKey, Recommendation] = {}
        self._blocked: dict[tuple[str, str], str] = {}

    def update(
        self,
        target: str,
        model: str,
        recommendations: Sequence[Recommendation],
        blocked: str | None = None,
    ) -> None:
        """Replaces the model's recommendations (and its blocked reason) with this
        evaluation's."""
        fresh = {_key(r): r for r in recommendations}
        self._set_blocked((target, model), blocked)
        with self._lock:
            previous = {k: v for k, v in self._active.items() if k[:2] == (target, model)}
            for key in previous.keys() - fresh.keys():
                del self._active[key]
            self._active.update(fresh)
        for key in sorted(previous.keys() - fresh.keys()):
            _log.info("recommendation_cleared", target=key[0], model=key[1], action=str(key[2]))
        for key, recommendation in fresh.items():
            old = previous.get(key)
            if old is None or (old.current, old.proposed) != (
                recommendation.current,
                recommendation.proposed,
            ):
                _log_recommendation(recommendation)

    def _set_blocked(self, key: tuple[str, str], reason: str | None) -> None:
        with self._lock:
            before = self._blocked.get(key)
            if reason is None:
                self._blocked.pop(key, None)
            else:
                self._blocked[key] = reason
        if before != reason:
            _log.info("advice_blocked", target=key[0], model=key[1], reason=reason)

    def retain(self, models: Iterable[tuple[str, str]]) -> None:
        """Forgets models that are no longer configured (config reload), silently."""
        wanted = set(models)
        with self._lock:
            self._active = {k: v for k, v in self._active.items() if k[:2] in wanted}
            self._blocked = {k: v for k, v in self._blocked.items() if k in wanted}

    def blocked(self) -> dict[tuple[str, str], str]:
        """(target, model) → why no change is safe, for the burning, bottlenecked models
        that have no recommendation."""
        with self._lock:
            return dict(self._blocked)

    def active(self) -> list[Recommendation]:
        """Every active recommendation, sorted by target, model and priority."""
        order = {rule.action: index for index, rule in enumerate(RULES)}
        with self._lock:
            items = list(self._active.values())
        return sorted(items, key=lambda r: (r.target, r.model, order[r.action]))

    def by_model(self) -> Mapping[tuple[str, str], list[Recommendation]]:
        grouped: dict[tuple[str, str], list[Recommendation]] = {}
        for recommendation in self.active():
            grouped.setdefault((recommendation.target, recommendation.model), []).append(
                recommendation
            )
        return grouped


def _log_recommendation(recommendation: Recommendation) -> None:
    _log.info(
        "recommendation",
        target=recommendation.target,
        model=recommendation.model,
        action=str(recommendation.action),
        parameter=recommendation.parameter,
        current=recommendation.current,
        proposed=recommendation.proposed,
        severity=str(recommendation.severity),
        config_change=recommendation.config_change,
        reason=recommendation.reason,
        evidence=dict(recommendation.evidence),
        expected_effect=recommendation.expected_effect,
    )
