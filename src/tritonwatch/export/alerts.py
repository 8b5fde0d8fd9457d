"""Alerts: their label sets, and Prometheus' contract for when to (re)send them (docs/design.md §9).

:class:`AlertBoard` receives the findings that are active at each evaluation as
:class:`AlertSpec` s (stable labels, current annotations) and answers which
:class:`Alert` s to send now, as Prometheus' rule manager does:

* a new alert is sent at once, then re-sent every ``resend_interval`` while it fires,
  each time with ``endsAt = now + 4 × max(evaluation interval, resend interval)`` so
  Alertmanager keeps it through two missed evaluations or sends;
* an alert that stops firing is sent with ``endsAt`` = the moment it resolved, then
  re-sent every ``resend_interval`` for 15 minutes, so a resolution lost on the way
  still arrives.

Label sets are the contract with Alertmanager routes and inhibit rules: an SLO alert
carries exactly the labels of the generated Prometheus rule, so the two evaluation
paths deduplicate into one alert.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from tritonwatch.analysis.advisor_records import Action, Recommendation
from tritonwatch.analysis.serving import NotServing, ServerDown
from tritonwatch.analysis.slo import SLOStatus

SLO_BURN = "TritonSLOBurn"
SERVER_DOWN = "TritonServerDown"
MODEL_NOT_SERVING = "TritonModelNotServing"
CANARY_STALLED = "TritonwatchCanaryStalled"
EXPORTER_ABSENT = "TritonwatchAbsent"
EXPORTER_DOWN = "TritonwatchDown"
GPU_UNDERUSED = "TritonGPUUnderused"
TUNING_RECOMMENDATION = "TritonTuningRecommendation"
DEFAULT_RUNBOOK_BASE = "docs/runbook.md"
RESOLVED_RETENTION_SECONDS = 15 * 60.0
"""How long a resolved alert keeps being re-sent (Prometheus' resolvedRetention)."""

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_SEPARATOR = 0xFF


def fingerprint(labels: Mapping[str, str]) -> str:
    """The label set's fingerprint as Prometheus and Alertmanager compute it (FNV-1a 64
    over sorted names and values, each followed by 0xFF), in hex."""
    value = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
            value = ((value ^ _SEPARATOR) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def rfc3339(unix_seconds: float) -> str:
    """``2024-05-01T12:00:00.000Z``: the timestamp form Alertmanager's API takes."""
    moment = datetime.fromtimestamp(unix_seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class AlertSpec:
    """A finding that should be firing: identity (labels) and current text (annotations)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert as sent: Alertmanager API v2's postable alert, plus whether it resolved."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float
    ends_at: float
    resolved: bool
    generator_url: str = ""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)

    def to_api(self) -> dict[str, Any]:
        """The JSON object ``POST /api/v2/alerts`` takes."""
        body: dict[str, Any] = {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": rfc3339(self.starts_at),
            "endsAt": rfc3339(self.ends_at),
        }
        if self.generator_url:
            body["generatorURL"] = self.generator_url
        return body


@dataclass(slots=True)
class _Tracked:
    spec: AlertSpec
    active_at: float
    resolved_at: float | None = None
    last_sent_at: float | None = None


class AlertBoard:
    """Firing and recently resolved alerts, and which of them are due to be sent.

    Args:
        evaluation_interval: seconds between :meth:`update` calls.
        resend_interval: seconds between re-sends of an unchanged alert.
        generator_url: where the alert comes from (the daemon's exporter).
        clock: Unix seconds.
    """

    def __init__(
        self,
        *,
        evaluation_interval: float = 15.0,
        resend_interval: float = 60.0,
        generator_url: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.evaluation_interval = evaluation_interval
        self.resend_interval = resend_interval
        self.generator_url = generator_url
        self._clock = clock
        self._tracked: dict[str, _Tracked] = {}
        self._lock = threading.Lock()

    @property
    def validity_seconds(self) -> float:
        """How far ``endsAt`` of a firing alert lies ahead of its send time."""
        return 4 * max(self.evaluation_interval, self.resend_interval)

    def update(self, active: Iterable[AlertSpec], now: float | None = None) -> list[Alert]:
        """Records which alerts fire now; returns those to send now, oldest first."""
        moment = self._clock() if now is None else now
        fresh = {spec.fingerprint: spec for spec in active}
        with self._lock:
            for key, spec in fresh.items():
                tracked = self._tracked.get(key)
                if tracked is None or tracked.resolved_at is not None:
                    self._tracked[key] = _Tracked(spec, moment)
                else:
                    tracked.spec = spec  # same labels, today's numbers
            for key, tracked in list(self._tracked.items()):
                if key in fresh:
                    continue
                if tracked.resolved_at is None:
                    tracked.resolved_at = moment
                elif moment - tracked.resolved_at > RESOLVED_RETENTION_SECONDS:
                    del self._tracked[key]
            due = [t for t in self._tracked.values() if self._needs_sending(t, moment)]
            for tracked in due:
                tracked.last_sent_at = moment
            return [self._alert(t, moment) for t in sorted(due, key=lambda t: t.active_at)]

    def _needs_sending(self, tracked: _Tracked, now: float) -> bool:
        if tracked.last_sent_at is None:
            return True
        if tracked.resolved_at is not None and tracked.last_sent_at < tracked.resolved_at:
            return True  # resolved since the last send: say so at once
        return now - tracked.last_sent_at >= self.resend_interval

    def _alert(self, tracked: _Tracked, now: float) -> Alert:
        resolved = tracked.resolved_at is not None
        ends_at = tracked.resolved_at if tracked.resolved_at is not None else now
        if not resolved:
            ends_at += self.validity_seconds
        return Alert(
            tracked.spec.labels,
            tracked.spec.annotations,
            tracked.active_at,
            ends_at,
            resolved,
            self.generator_url,
        )

    def firing(self) -> list[AlertSpec]:
        """The alerts firing now."""
        with self._lock:
            return [t.spec for t in self._tracked.values() if t.resolved_at is None]


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


def _evidence_text(evidence: Mapping[str, float]) -> str:
    return ", ".join(f"{name}={value:.4g}" for name, value in evidence.items())


def recommendation_alert(
    recommendation: Recommendation, runbook_base: str = DEFAULT_RUNBOOK_BASE
) -> AlertSpec:
    """The alert of an active recommendation; GPU underuse has its own alert name."""
    name = GPU_UNDERUSED if recommendation.action == Action.ADD_INSTANCE else TUNING_RECOMMENDATION
    r = recommendation
    kind = "change" if r.config_change else "advice"
    # A pipeline's step: the labels stay the step's (one alert per model and action,
    # whichever evaluation found it); the annotations name the pipeline it serves.
    serves = {"pipeline": r.pipeline} if r.pipeline else {}
    summary = f"{r.model} on {r.target}: {r.action} ({kind})"
    if r.pipeline:
        summary += f" for {r.pipeline}'s latency SLO"
    return AlertSpec(
        _frozen(
            {
                "alertname": name,
                "severity": str(r.severity),
                "target": r.target,
                "model": r.model,
                "action": str(r.action),
            }
        ),
        _frozen(
            {
                "summary": summary,
                "description": f"{r.reason}. Evidence: {_evidence_text(r.evidence)}. "
                f"Expected effect: {r.expected_effect}.",
                **serves,
                "proposed_change": r.proposed_change,
                "current_value": str(r.current),
                "proposed_value": str(r.proposed),
                "expected_effect": r.expected_effect,
                "runbook_url": f"{runbook_base}#{r.action}",
            }
        ),
    )


def slo_burn_alert(
    status: SLOStatus,
    recommendations: Sequence[Recommendation] = (),
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
) -> AlertSpec | None:
    """The alert of an SLO whose burn condition holds (labels as the generated rule's);
    ``recommendations`` are the model's, and its configuration change, if any, is
    named as the proposed change (prefixed with the step's name when it is a pipeline's
    step's)."""
    condition = status.firing
    if condition is None:
        return None
    spec, rates = status.spec, status.burn_rates
    change = next(
        (
            r.proposed_change if r.model == spec.model else f"{r.model}: {r.proposed_change}"
            for r in recommendations
            if r.config_change
        ),
        "none",
    )
    remaining = status.error_budget_remaining
    budget_text = "unknown" if remaining is None else f"{remaining:.1%}"
    long_rate, short_rate = rates.get(condition.long_window), rates.get(condition.short_window)
    return AlertSpec(
        _frozen(
            {
                "alertname": SLO_BURN,
                "severity": str(condition.severity),
                "target": spec.target,
                "model": spec.model,
                "slo": str(spec.kind),
                "source": str(status.source),
            }
        ),
        _frozen(
            {
                "summary": f"{spec.model} on {spec.target} is burning its {spec.kind.words} error "
                f"budget ({condition.severity})",
                "description": f"Burn rate {long_rate or 0:.1f}× over {condition.long_window} "
                f"and {short_rate or 0:.1f}× over {condition.short_window} "
                f"(limit {condition.factor:g}×, {status.source} events, objective "
                f"{spec.objective:.4g}); error budget remaining over the period: {budget_text}.",
                "proposed_change": change,
                "runbook_url": f"{runbook_base}#{SLO_BURN.lower()}",
            }
        ),
    )


ERROR_TEXT_LIMIT = 500
"""Characters of the last error an annotation carries (a server may answer a page)."""


def server_down_alert(
    down: ServerDown, now: float, runbook_base: str = DEFAULT_RUNBOOK_BASE
) -> AlertSpec:
    """``TritonServerDown``: labels as the generated rule's (``target``, severity page)."""
    latest = down.latest
    error = latest.error or str(latest.outcome)
    return AlertSpec(
        _frozen({"alertname": SERVER_DOWN, "severity": "page", "target": down.target}),
        _frozen(
            {
                "summary": f"Triton server {down.target} is down",
                "description": f"{down.target} has failed its readiness check for "
                f"{now - down.since:.0f} s ({latest.outcome}: {error[:ERROR_TEXT_LIMIT]}); "
                "its models' SLO burn and not-serving alerts are inhibited while this one fires.",
                "runbook_url": f"{runbook_base}#{SERVER_DOWN.lower()}",
            }
        ),
    )


def not_serving_alert(verdict: NotServing, runbook_base: str = DEFAULT_RUNBOOK_BASE) -> AlertSpec:
    """``TritonModelNotServing``: labels as the generated rule's (``target``, ``model``,
    severity page); the annotations carry the last error and how many requests failed."""
    last = verdict.last_error
    outcome = "unknown" if last is None else last.outcome
    error = "" if last is None else (last.error or "(no message)")[:ERROR_TEXT_LIMIT]
    return AlertSpec(
        _frozen(
            {
                "alertname": MODEL_NOT_SERVING,
                "severity": "page",
                "target": verdict.target,
                "model": verdict.model,
            }
        ),
        _frozen(
            {
                "summary": f"{verdict.model} on {verdict.target} is not serving: the server "
                "is ready, every canary request fails",
                "description": f"The last {verdict.failed} canary requests failed, for "
                f"{verdict.failing_seconds:.0f} s, while the server answers its "
                f"readiness check. Last error: {outcome}: {error}",
                "failed_requests": str(verdict.failed),
                "last_error": f"{outcome}: {error}",
                "runbook_url": f"{runbook_base}#{MODEL_NOT_SERVING.lower()}",
            }
        ),
    )


def active_alerts(
    statuses: Iterable[SLOStatus],
    recommendations: Iterable[Recommendation],
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
) -> list[AlertSpec]:
    """Every alert that should fire now: SLO burns, then recommendations."""
    by_model: dict[tuple[str, str], list[Recommendation]] = {}
    specs: list[AlertSpec] = []
    for recommendation in recommendations:
        by_model.setdefault((recommendation.target, recommendation.model), []).append(
            recommendation
        )
        if recommendation.pipeline:  # the pipeline's burn names its step's change too
            by_model.setdefault((recommendation.target, recommendation.pipeline), []).append(
                recommendation
            )
        specs.append(recommendation_alert(recommendation, runbook_base))
    burns = [
        slo_burn_alert(s, by_model.get((s.spec.target, s.spec.model), ()), runbook_base)
        for s in statuses
    ]
    return [burn for burn in burns if burn is not None] + specs
