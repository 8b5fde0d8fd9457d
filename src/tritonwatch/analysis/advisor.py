"""The advisor: at most one configuration change per model, plus advice (docs/design.md §7).

:func:`advise` runs every rule of :data:`~tritonwatch.analysis.advisor_rules.RULES`
over one model's window and keeps the highest-priority configuration change (one
change at a time, so an experiment can tell what helped) and every piece of advice
that needs no change. Pure: what stays active between evaluations, and the log line
when a recommendation appears, changes or clears, is the wiring's
(:class:`~tritonwatch.runtime.recommendation_board.RecommendationBoard`).
"""

from __future__ import annotations

from collections.abc import Collection
from types import MappingProxyType

from tritonwatch.analysis.advisor_records import (
    Action,
    AdvisorInput,
    AdvisorThresholds,
    Recommendation,
)
from tritonwatch.analysis.advisor_rules import RULES
from tritonwatch.common.logs import get_logger

_log = get_logger("advisor")

WITHOUT_EXECUTIONS: frozenset[Action] = frozenset({Action.TUNE_QUEUE_POLICY})
"""The only advice a window in which the model never executed can give (every request a
response-cache hit): refused requests. Every other rule reads the model's own stages."""


def advise(
    model: AdvisorInput,
    thresholds: AdvisorThresholds | None = None,
    *,
    only: Collection[Action] | None = None,
) -> list[Recommendation]:
    """The recommendations for one model: its top configuration change first (if any),
    then every piece of advice that needs no configuration change, in priority order.

    ``only`` limits the rules to those actions (a pipeline's step, an ensemble's own). A
    window in which requests completed but none executed (all response-cache hits) gives
    only :data:`WITHOUT_EXECUTIONS` advice."""
    limits = thresholds or AdvisorThresholds()
    chosen: list[Recommendation] = []
    change_taken = False
    for rule in RULES:
        if rule.config_change and change_taken:
            continue
        if only is not None and rule.action not in only:
            continue
        if model.never_executed and rule.action not in WITHOUT_EXECUTIONS:
            continue
        finding = rule.check(model, limits)
        if finding is None:
            continue
        change_taken = change_taken or rule.config_change
        chosen.append(
            Recommendation(
                target=model.target,
                model=model.model,
                action=rule.action,
                parameter=finding.parameter,
                current=finding.current,
                proposed=finding.proposed,
                severity=rule.severity,
                reason=finding.reason,
                evidence=MappingProxyType(
                    {
                        name: float(f"{value:.6g}")  # 0.9, not 0.8999999999999999
                        for name, value in finding.evidence.items()
                        if value is not None
                    }
                ),
                expected_effect=finding.expected_effect,
                config_change=rule.config_change,
            )
        )
    return chosen
