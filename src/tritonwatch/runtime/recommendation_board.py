"""The active recommendations of every model, between evaluations.

The advisor (:func:`~tritonwatch.analysis.advisor.advise`) judges one evaluation; the
board remembers what is active for each model — and, for a burning, bottlenecked model
with no safe change, why (:mod:`~tritonwatch.analysis.advice_blocked`) — logs a line only
when either appears, changes or clears, and is what the exporter, the status page and
the alert board read. Thread-safe: written by the evaluation job, read by the exporter's threads.

**Pipelines.** A watched pipeline's evaluation may recommend a change to one of its steps
(``model`` the step, ``pipeline`` the pipeline: :mod:`~tritonwatch.analysis.pipeline_advice`),
and the step may be watched too, with advice of its own. Each evaluation's advice is kept
under its *source* (the watched model evaluated), so neither source's update clears the
other's; what is shown — the exported ``tritonwatch_recommendation``, the alerts, the
status page — is one recommendation per (target, model, action), keyed exactly as before:

* for the same action, the step's own evaluation wins (its own numbers, its own SLO),
  else the pipeline first by name; the other sources' reasons are not lost, only not
  shown twice (each was logged when it appeared);
* at most one configuration change per model, whatever the sources: the highest in the
  advisor's priority order (:data:`~tritonwatch.analysis.advisor_rules.RULES`), ties to
  the model's own evaluation;
* a pipeline's row on the status page (:meth:`RecommendationBoard.by_model`) lists its
  own advice for its steps, in its own words, for the steps' changes that are shown.
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
        self._active: dict[tuple[str, str, str, Action], Recommendation] = {}
        """(target, source, model, action) → the source's recommendation."""
        self._blocked: dict[tuple[str, str], str] = {}

    def update(
        self,
        target: str,
        model: str,
        recommendations: Sequence[Recommendation],
        blocked: str | None = None,
    ) -> None:
        """Replaces the recommendations of the evaluation of ``model`` (its own, and
        those for its steps when it is a pipeline) and its blocked reason with this
        evaluation's."""
        fresh = {(target, model, r.model, r.action): r for r in recommendations}
        self._set_blocked((target, model), blocked)
        with self._lock:
            previous = {k: v for k, v in self._active.items() if k[:2] == (target, model)}
            for key in previous.keys() - fresh.keys():
                del self._active[key]
            self._active.update(fresh)
        for key in sorted(previous.keys() - fresh.keys()):
            via = {} if key[1] == key[2] else {"pipeline": key[1]}
            _log.info(
                "recommendation_cleared", target=key[0], model=key[2], action=str(key[3]), **via
            )
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
        """Every active recommendation, one per (target, model, action) and at most one
        configuration change per model (module docstring), sorted by target, model and
        priority."""
        order = {rule.action: index for index, rule in enumerate(RULES)}
        with self._lock:
            items = list(self._active.values())
        chosen: dict[RecommendationKey, Recommendation] = {}
        for r in sorted(items, key=lambda r: (r.pipeline != "", r.pipeline)):
            chosen.setdefault(_key(r), r)  # the model's own first, then pipelines by name
        shown = sorted(
            chosen.values(), key=lambda r: (r.target, r.model, order[r.action], r.pipeline != "")
        )
        changed: set[tuple[str, str]] = set()
        kept = []
        for r in shown:
            if r.config_change and (r.target, r.model) in changed:
                continue
            changed.update([(r.target, r.model)] if r.config_change else [])
            kept.append(r)
        return kept

    def by_model(self) -> Mapping[tuple[str, str], list[Recommendation]]:
        """The shown recommendations by (target, model); each pipeline's advice for its
        steps also under the pipeline (a step may not be watched: the pipeline's row
        names it), in its own words, for the steps' actions that are shown."""
        shown = self.active()
        grouped: dict[tuple[str, str], list[Recommendation]] = {}
        for r in shown:
            grouped.setdefault((r.target, r.model), []).append(r)
        keys = {_key(r) for r in shown}
        with self._lock:
            via = [r for r in self._active.values() if r.pipeline and _key(r) in keys]
        for r in sorted(via, key=lambda r: (r.model, r.action)):
            grouped.setdefault((r.target, r.pipeline), []).append(r)
        return grouped


def _log_recommendation(recommendation: Recommendation) -> None:
    via = {"pipeline": recommendation.pipeline} if recommendation.pipeline else {}
    _log.info(
        "recommendation",
        **via,
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
