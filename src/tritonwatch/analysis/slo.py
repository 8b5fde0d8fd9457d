"""SLOs, burn rates and the multiwindow, multi-burn-rate alert policy (docs/design.md §6).

Pure functions: event counts in, ratios and verdicts out. The same numbers drive the
daemon's in-process alerts and the Prometheus rules :mod:`tritonwatch.commands.rules` writes,
so both compare the *error ratio* against ``factor × (1 − objective)`` with a strict
``>``, exactly as the generated PromQL does.

Burn rate over a window W = (bad events / all events over W) / (1 − objective): 1 means
the error budget would last exactly the SLO period, 14.4 means 2 % of a 30-day budget
goes in one hour. A window without events has no burn rate (``None``), never 0: no
traffic is not good traffic, and nothing is exported for it.

**Enough events** (the SRE Workbook's low-traffic caveat; slo-generator's
``MIN_VALID_EVENTS``): a condition also needs its long window to hold at least
:meth:`BurnCondition.min_events` events, ``min_bad_events / (factor × budget)``: so
many that ``min_bad_events`` failures alone stay at or under its limit. A handful of
failures on a young window (a Triton restart right after the daemon started) reads as a
huge ratio; with the default of 10 it cannot page (695 events over 1 h at 99.9 %, 14
at 95 %), while a window that holds its normal traffic is not affected at all.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from tritonwatch.config.schema import Config
from tritonwatch.config.slo_schema import DEFAULT_ALERT_MIN_BAD_EVENTS, LatencySLO, SLOConfig


class SLOKind(StrEnum):
    """Which SLI an SLO judges; exported as the ``slo`` label."""

    LATENCY = "latency"
    AVAILABILITY = "availability"
    TTFT = "ttft"
    """Streaming models: one event per successful stream, good when its first token came
    within the threshold."""
    ITL = "itl"
    """Streaming models: one event per gap between tokens of a successful stream, good
    when the gap was within the threshold."""

    @property
    def words(self) -> str:
        """How alert texts name the SLI: the label value, spelled out for the streaming
        ones whose abbreviations a reader may not know."""
        return _KIND_WORDS.get(self, str(self))


_KIND_WORDS = {
    SLOKind.TTFT: "TTFT (time to first token)",
    SLOKind.ITL: "ITL (inter-token latency)",
}


class SliSource(StrEnum):
    """Where the events come from; exported as the ``source`` label."""

    CANARY = "canary"
    """The canary's requests, measured by the client end to end."""
    SERVER = "server"
    """Triton's own success/failure counters (all traffic; availability only)."""


class Severity(StrEnum):
    PAGE = "page"
    TICKET = "ticket"
    INFO = "info"


WINDOWS: dict[str, float] = {
    "5m": 300.0,
    "30m": 1800.0,
    "1h": 3600.0,
    "2h": 7200.0,
    "6h": 21600.0,
    "1d": 86400.0,
    "3d": 259200.0,
}
"""The burn-rate windows, by the name used in labels and rule names."""


@dataclass(frozen=True, slots=True)
class BurnCondition:
    """One line of the SRE Workbook's table: alert when the error ratio exceeds
    ``factor × budget`` over both the long and the short window. The short window makes
    the alert stop soon after the burn stops, instead of when the long window forgets it."""

    severity: Severity
    factor: float
    long_window: str
    short_window: str

    def min_events(self, budget: float, min_bad_events: float) -> float:
        """The events the long window must hold: ``min_bad_events / (factor × budget)``,
        so that ``min_bad_events`` failures alone never exceed the limit (the generated
        rule writes the same expression, so both paths compare the same float)."""
        return min_bad_events / (self.factor * budget)

    def holds(
        self,
        error_ratios: Mapping[str, float | None],
        budget: float,
        events: Mapping[str, float] | None = None,
        min_bad_events: float = 0.0,
    ) -> bool:
        """Both windows' error ratios are above ``factor × budget`` (None never is) and,
        when ``min_bad_events`` > 0, the long window holds at least
        :meth:`min_events` of ``events`` (window name → total events)."""
        limit = self.factor * budget
        long, short = error_ratios.get(self.long_window), error_ratios.get(self.short_window)
        if long is None or short is None or not (long > limit and short > limit):
            return False
        if min_bad_events <= 0:
            return True
        held = (events or {}).get(self.long_window, 0.0)
        return held >= self.min_events(budget, min_bad_events)


BURN_POLICY: tuple[BurnCondition, ...] = (
    BurnCondition(Severity.PAGE, 14.4, "1h", "5m"),
    BurnCondition(Severity.PAGE, 6.0, "6h", "30m"),
    BurnCondition(Severity.TICKET, 3.0, "1d", "2h"),
    BurnCondition(Severity.TICKET, 1.0, "3d", "6h"),
)
"""SRE Workbook, "Alerting on SLOs", multiwindow multi-burn-rate; highest severity first."""


@dataclass(frozen=True, slots=True)
class SLOSpec:
    """One SLO of one model, resolved from the config (global defaults + model overrides)."""

    target: str
    model: str
    kind: SLOKind
    objective: float
    period_seconds: float
    threshold_seconds: float | None = None
    """The latency, TTFT or ITL threshold; None for availability."""
    min_bad_events: float = DEFAULT_ALERT_MIN_BAD_EVENTS
    """``slo.alert_min_bad_events``: how many failures alone never raise a burn alert
    (:meth:`BurnCondition.min_events`); 0 turns the gate off."""
    off_if_streaming: bool = False
    """A latency SLO by default only, of a model whose canary may stream
    (``canary.stream.mode: auto``): it goes once the canary finds the model streams, and
    the generated rules leave out its SLI for a model with a TTFT series."""

    @property
    def error_budget(self) -> float:
        """The fraction of events allowed to be bad: 1 − objective."""
        return 1.0 - self.objective


def _threshold_spec(
    target: str, model: str, kind: SLOKind, slo: LatencySLO, config: SLOConfig
) -> SLOSpec:
    return SLOSpec(
        target,
        model,
        kind,
        slo.objective,
        config.period,
        slo.threshold,
        config.alert_min_bad_events,
    )


def slo_specs(config: Config, streaming: Collection[tuple[str, str]] = ()) -> list[SLOSpec]:
    """Every model's SLOs in config order: latency, availability, TTFT, ITL, each where it
    judges the model (:meth:`~tritonwatch.config.slo_schema.SLOConfig.judged`).

    A model streams when its canary surely does (``stream.mode: on``, protocol
    ``openai``) or when ``(target, model)`` is in ``streaming`` (the canary found it
    ``decoupled`` at run time): then TTFT and ITL are on, their defaults where unset, and
    latency only where written. Availability always.
    """
    specs = []
    for target in config.targets:
        for model in target.models:
            slo = config.slo_for(model)
            canary = config.canary_for(target, model)
            streams = canary.streams_surely or (target.name, model.name) in streaming
            judged = slo.judged(streams)
            name = (target.name, model.name)
            if judged.latency is not None:
                latency = _threshold_spec(*name, SLOKind.LATENCY, judged.latency, slo)
                if not streams and not slo.latency_set and canary.stream.mode == "auto":
                    latency = replace(latency, off_if_streaming=True)
                specs.append(latency)
            specs.append(
                SLOSpec(
                    *name,
                    SLOKind.AVAILABILITY,
                    slo.availability.objective,
                    slo.period,
                    min_bad_events=slo.alert_min_bad_events,
                )
            )
            for kind, streaming_slo in ((SLOKind.TTFT, judged.ttft), (SLOKind.ITL, judged.itl)):
                if streaming_slo is not None:
                    specs.append(_threshold_spec(*name, kind, streaming_slo, slo))
    return specs


@dataclass(frozen=True, slots=True)
class EventCounts:
    """Bad and total events over some span (floats: window edges are weighted)."""

    bad: float
    total: float

    @property
    def error_ratio(self) -> float | None:
        """bad / total, or None when there were no events."""
        return self.bad / self.total if self.total > 0 else None


def burn_rate(bad: float, total: float, objective: float) -> float | None:
    """(bad / total) / (1 − objective); None when ``total`` is 0.

    Raises:
        ValueError: ``objective`` is not strictly between 0 and 1.
    """
    if not 0.0 < objective < 1.0:
        raise ValueError(f"objective must be between 0 and 1, both excluded, got: {objective}")
    if total <= 0:
        return None
    return (bad / total) / (1.0 - objective)


def error_budget_remaining(bad: float, total: float, objective: float) -> float | None:
    """1 − burn rate over the period: 1 = untouched, 0 = spent, negative = overspent."""
    rate = burn_rate(bad, total, objective)
    return None if rate is None else 1.0 - rate


def firing_condition(
    error_ratios: Mapping[str, float | None],
    budget: float,
    events: Mapping[str, float] | None = None,
    min_bad_events: float = 0.0,
) -> BurnCondition | None:
    """The highest-severity condition of :data:`BURN_POLICY` that holds, if any
    (``events`` and ``min_bad_events`` as :meth:`BurnCondition.holds` takes them).

    Only the highest is reported: a page inhibits the ticket for the same SLO anyway
    (the shipped ``alertmanager.yml`` says so too), so the daemon does not send both.
    """
    for condition in BURN_POLICY:
        if condition.holds(error_ratios, budget, events, min_bad_events):
            return condition
    return None


@dataclass(frozen=True, slots=True)
class SLOStatus:
    """One SLO from one source, evaluated at one instant."""

    spec: SLOSpec
    source: SliSource
    error_ratios: dict[str, float | None]
    """window name → bad/total over the window (None: no events)."""
    period_error_ratio: float | None
    """bad/total over the SLO period, as far as the event store reaches back."""
    firing: BurnCondition | None
    window_events: Mapping[str, float] = field(default_factory=dict)
    """window name → total events over the window (what the min-events gate read)."""

    @property
    def burn_rates(self) -> dict[str, float | None]:
        budget = self.spec.error_budget
        return {w: None if r is None else r / budget for w, r in self.error_ratios.items()}

    @property
    def error_budget_remaining(self) -> float | None:
        ratio = self.period_error_ratio
        return None if ratio is None else 1.0 - ratio / self.spec.error_budget


def evaluate_slo(
    spec: SLOSpec,
    source: SliSource,
    window_counts: Mapping[str, EventCounts],
    period_counts: EventCounts,
) -> SLOStatus:
    """Error ratios, budget and the firing condition of one SLO from its event counts."""
    ratios = {window: counts.error_ratio for window, counts in window_counts.items()}
    events = {window: counts.total for window, counts in window_counts.items()}
    return SLOStatus(
        spec,
        source,
        ratios,
        period_counts.error_ratio,
        firing_condition(ratios, spec.error_budget, events, spec.min_bad_events),
        events,
    )


def detection_seconds(condition: BurnCondition, bad_fraction: float, budget: float) -> float:
    """How long a burn at ``bad_fraction`` (bad/total, steady, from a clean start) takes
    to trip ``condition``'s long window: long × factor × budget / bad_fraction; infinite
    when ``bad_fraction`` never exceeds factor × budget.

    Documentation in code: with a 0.95 latency objective, a total outage pages after
    1 h × 14.4 × 0.05 = 43 min, while a 0.999 availability objective pages after 52 s,
    once the long window holds its :meth:`BurnCondition.min_events`.
    """
    limit = condition.factor * budget
    if bad_fraction <= limit:
        return float("inf")  # the ratio never exceeds the limit
    return WINDOWS[condition.long_window] * condition.factor * budget / bad_fraction
