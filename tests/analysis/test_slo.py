"""Burn-rate maths, the SRE Workbook's conditions and SLOs from the config."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tritonwatch.analysis.slo import (
    BURN_POLICY,
    WINDOWS,
    BurnCondition,
    EventCounts,
    Severity,
    SliSource,
    SLOKind,
    SLOSpec,
    burn_rate,
    detection_seconds,
    error_budget_remaining,
    evaluate_slo,
    firing_condition,
    slo_specs,
)
from tritonwatch.config import parse_config

objectives = st.floats(min_value=0.5, max_value=0.99999, allow_nan=False)
totals = st.floats(min_value=1.0, max_value=1e9, allow_nan=False)


def test_burn_rate_by_hand() -> None:
    """30 bad of 10 000 with a 99.9 % objective: 0.3 % errors is 3× the 0.1 % budget."""
    assert burn_rate(30, 10_000, 0.999) == pytest.approx(3.0)
    assert burn_rate(0, 10_000, 0.999) == 0.0
    assert burn_rate(500, 1_000, 0.95) == pytest.approx(10.0)


def test_no_events_means_no_burn_rate_not_zero() -> None:
    """No traffic gives no burn rate and no budget figure (None), not 0 and a full budget."""
    assert burn_rate(0, 0, 0.999) is None
    assert error_budget_remaining(0, 0, 0.999) is None
    assert EventCounts(0, 0).error_ratio is None


def test_objective_outside_the_unit_interval_is_refused() -> None:
    """An objective of 1.0 (zero error budget) is refused, not divided by."""
    with pytest.raises(ValueError, match="objective must be between 0 and 1"):
        burn_rate(1, 10, 1.0)


@pytest.mark.parametrize("objective", [0.0, 1.0, -0.5, 1.5])
def test_an_objective_of_zero_or_one_or_outside_is_refused(objective: float) -> None:
    """Breaks if either end of the unit interval is accepted: an objective of 0 (every
    event may be bad) promises nothing, one of 1 leaves no budget to divide by."""
    with pytest.raises(ValueError, match=f"both excluded, got: {objective}"):
        burn_rate(1, 10, objective)


def test_error_budget_remaining_by_hand() -> None:
    """A quarter of the budget spent leaves 0.75; twice the budget spent leaves −1."""
    assert error_budget_remaining(25, 100_000, 0.999) == pytest.approx(0.75)
    assert error_budget_remaining(200, 100_000, 0.999) == pytest.approx(-1.0)


@given(objective=objectives, total=totals)
def test_burn_rate_is_one_exactly_when_the_bad_ratio_equals_the_budget(
    objective: float, total: float
) -> None:
    """Errors exactly at the budget give burn rate 1 and no budget left."""
    bad = total * (1.0 - objective)
    assume(bad / total == 1.0 - objective)  # the float product may not round-trip
    assert burn_rate(bad, total, objective) == 1.0
    assert error_budget_remaining(bad, total, objective) == 0.0


@given(objective=objectives, total=totals, share=st.floats(min_value=0.0, max_value=1.0))
def test_burn_rate_is_above_one_exactly_when_the_bad_ratio_exceeds_the_budget(
    objective: float, total: float, share: float
) -> None:
    """The burn rate is error ratio over budget, above 1 exactly when the budget is exceeded."""
    rate = burn_rate(share * total, total, objective)
    assert rate is not None
    assert math.isclose(rate, (share * total / total) / (1 - objective))
    assert (rate > 1.0) == ((share * total) / total > 1.0 - objective)


def _ratios(**by_window: float) -> dict[str, float | None]:
    ratios: dict[str, float | None] = dict.fromkeys(WINDOWS)
    ratios.update(by_window)
    return ratios


def test_policy_is_the_sre_workbook_table() -> None:
    """The burn policy keeps the SRE Workbook's factors, windows and severities."""
    table = [(c.severity, c.factor, c.long_window, c.short_window) for c in BURN_POLICY]
    assert table == [
        (Severity.PAGE, 14.4, "1h", "5m"),
        (Severity.PAGE, 6.0, "6h", "30m"),
        (Severity.TICKET, 3.0, "1d", "2h"),
        (Severity.TICKET, 1.0, "3d", "6h"),
    ]


@pytest.mark.parametrize("condition", BURN_POLICY, ids=lambda c: f"{c.factor}x")
def test_each_condition_needs_both_windows_above_its_limit(condition: BurnCondition) -> None:
    """Just above the limit on both windows fires; just below on either does not."""
    budget = 0.001
    limit = condition.factor * budget
    long, short = condition.long_window, condition.short_window
    above, below = limit * 1.001, limit * 0.999
    assert condition.holds(_ratios(**{long: above, short: above}), budget)
    assert not condition.holds(_ratios(**{long: below, short: above}), budget)
    assert not condition.holds(_ratios(**{long: above, short: below}), budget)
    assert not condition.holds(_ratios(**{long: above}), budget)
    assert not condition.holds(_ratios(**{long: limit, short: limit}), budget)


@pytest.mark.parametrize("condition", BURN_POLICY, ids=lambda c: f"{c.factor}x")
def test_a_window_exactly_at_its_limit_does_not_hold(condition: BurnCondition) -> None:
    """Breaks if an error ratio equal to factor × budget on either window holds: the
    rules compare with a strict ``>``, and so must the daemon."""
    budget = 0.001
    limit = condition.factor * budget
    long, short = condition.long_window, condition.short_window
    assert condition.holds({long: 1.0, short: 1.0}, budget)
    assert not condition.holds({long: limit, short: 1.0}, budget)
    assert not condition.holds({long: 1.0, short: limit}, budget)


def test_a_long_window_without_an_event_count_holds_no_events() -> None:
    """Breaks if a long window missing from ``events`` counts as holding any events:
    with min_bad_events set, its condition cannot hold."""
    ticket = BURN_POLICY[3]  # factor 1: with a budget of 0.5, 0.4 failures need 0.8 events
    ratios = {"3d": 0.9, "6h": 0.9}
    assert ticket.min_events(0.5, 0.4) == pytest.approx(0.8)
    assert not ticket.holds(ratios, 0.5, {}, min_bad_events=0.4)
    assert ticket.holds(ratios, 0.5, {"3d": 0.8}, min_bad_events=0.4)


def test_the_highest_severity_wins() -> None:
    """Every window at 20× the budget: both pages and tickets hold, the 14.4× page is named."""
    ratios = _ratios(**dict.fromkeys(WINDOWS, 0.02))
    condition = firing_condition(ratios, 0.001)
    assert condition is not None
    assert (condition.severity, condition.factor) == (Severity.PAGE, 14.4)
    ticket = firing_condition(_ratios(**dict.fromkeys(WINDOWS, 0.0011)), 0.001)
    assert ticket is not None
    assert (ticket.severity, ticket.factor) == (Severity.TICKET, 1.0)
    assert firing_condition(_ratios(**dict.fromkeys(WINDOWS, 0.0009)), 0.001) is None


def test_evaluate_slo_reports_ratios_burn_rates_and_budget() -> None:
    """An SLO status has each window's ratio and burn rate (None when empty), budget and page."""
    spec = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
    windows = {name: EventCounts(15, 1_000) for name in WINDOWS}
    windows["3d"] = EventCounts(0, 0)
    status = evaluate_slo(spec, SliSource.CANARY, windows, EventCounts(50, 100_000))
    assert status.error_ratios["5m"] == 0.015
    assert status.error_ratios["3d"] is None
    assert status.burn_rates["1h"] == pytest.approx(15.0)
    assert status.burn_rates["3d"] is None
    assert status.error_budget_remaining == pytest.approx(0.5)
    assert status.firing is BURN_POLICY[0]


def test_specs_merge_model_overrides_with_global_defaults() -> None:
    """A model's SLO override keeps the global defaults and stays out of other models."""
    config = parse_config(
        """
slo: {availability: {objective: 0.99}, period: 30d}
targets:
  - name: a
    url: http://h:8000
    models:
      - {name: m1}
      - {name: m2, slo: {latency: {threshold: 200ms}}}
""",
        "inline.yaml",
    )
    specs = {(s.model, s.kind): s for s in slo_specs(config)}
    assert len(specs) == 4
    assert specs[("m1", SLOKind.LATENCY)].threshold_seconds == 0.05
    assert specs[("m2", SLOKind.LATENCY)].threshold_seconds == 0.2
    assert specs[("m2", SLOKind.LATENCY)].objective == 0.95
    assert specs[("m2", SLOKind.AVAILABILITY)].objective == 0.99
    assert specs[("m1", SLOKind.AVAILABILITY)].threshold_seconds is None
    assert {s.period_seconds for s in specs.values()} == {30 * 86400.0}


def test_detection_time_of_a_total_outage() -> None:
    """The page's long window must reach 14.4 × budget: 52 s at 99.9 %, 43 min at 95 %."""
    page = BURN_POLICY[0]
    assert detection_seconds(page, 1.0, 0.001) == pytest.approx(51.84)
    assert detection_seconds(page, 1.0, 0.05) == pytest.approx(2592.0)
    assert detection_seconds(page, 0.5, 0.05) == math.inf


STREAMING = """
slo: {ttft: {threshold: 500ms}, period: 30d}
targets:
  - name: a
    url: http://h:8000
    models:
      - {name: llm}
      - {name: chat, slo: {ttft: {objective: 0.99}, itl: {threshold: 50ms, objective: 0.9}}}
      - {name: plain, slo: {ttft: null}}
"""


def test_detection_time_of_a_partial_outage_and_of_a_burn_at_the_limit() -> None:
    """Half the requests failing against a 99.9 % objective pages after 1 h × 14.4 ×
    0.001 / 0.5 = 104 s; a bad fraction exactly at factor × budget never exceeds it."""
    page = BURN_POLICY[0]
    assert detection_seconds(page, 0.5, 0.001) == pytest.approx(103.68)
    assert detection_seconds(page, page.factor * 0.001, 0.001) == math.inf


def test_ttft_and_itl_slos_come_from_the_global_and_the_model_section() -> None:
    """Breaks if a set slo.ttft/itl (global or per model) gives no TTFT/ITL spec, or an
    unset one gives one (none of these models is known to stream), or the model's fields
    do not merge onto the global ones."""
    specs = {(s.model, s.kind): s for s in slo_specs(parse_config(STREAMING, "inline.yaml"))}
    kinds = {model: {k for m, k in specs if m == model} for model in ("llm", "chat", "plain")}
    assert kinds == {
        "llm": {SLOKind.LATENCY, SLOKind.AVAILABILITY, SLOKind.TTFT},
        "chat": {SLOKind.LATENCY, SLOKind.AVAILABILITY, SLOKind.TTFT, SLOKind.ITL},
        "plain": {SLOKind.LATENCY, SLOKind.AVAILABILITY},
    }
    llm_ttft, chat_ttft, chat_itl = (
        specs[("llm", SLOKind.TTFT)],
        specs[("chat", SLOKind.TTFT)],
        specs[("chat", SLOKind.ITL)],
    )
    # A field left unwritten comes from the TTFT SLO's own defaults (99 %), not latency's.
    assert (llm_ttft.threshold_seconds, llm_ttft.objective) == (0.5, 0.99)
    assert (chat_ttft.threshold_seconds, chat_ttft.objective) == (0.5, 0.99)
    assert (chat_itl.threshold_seconds, chat_itl.objective) == (0.05, 0.9)
    assert chat_itl.period_seconds == 30 * 86400.0
    assert chat_itl.error_budget == pytest.approx(0.1)


def test_streaming_slos_follow_latency_and_availability_in_config_order() -> None:
    """Breaks if TTFT/ITL specs reorder the existing ones (rule files and exports follow it)."""
    specs = slo_specs(parse_config(STREAMING, "inline.yaml"))
    assert [(s.model, str(s.kind)) for s in specs] == [
        ("llm", "latency"), ("llm", "availability"), ("llm", "ttft"),
        ("chat", "latency"), ("chat", "availability"), ("chat", "ttft"), ("chat", "itl"),
        ("plain", "latency"), ("plain", "availability"),
    ]  # fmt: skip


def test_alert_texts_spell_the_streaming_slis_out() -> None:
    """Breaks if an alert says a bare "ttft"/"itl", or latency/availability texts change."""
    assert [kind.words for kind in SLOKind] == [
        "latency",
        "availability",
        "TTFT (time to first token)",
        "ITL (inter-token latency)",
    ]


@pytest.mark.parametrize("condition", BURN_POLICY, ids=lambda c: f"{c.factor}x")
def test_a_condition_needs_its_min_events_in_the_long_window(condition: BurnCondition) -> None:
    """Breaks if a burn holds on a long window with fewer than min_bad / (factor ×
    budget) events, or is refused at exactly that many (the promtool edge case)."""
    budget = 1 - 0.999
    need = condition.min_events(budget, 10.0)
    assert need == 10.0 / (condition.factor * (1 - 0.999))
    ratios = _ratios(**{condition.long_window: 0.5, condition.short_window: 0.5})
    long = condition.long_window
    assert condition.holds(ratios, budget, {long: need}, 10.0)
    assert not condition.holds(ratios, budget, {long: math.nextafter(need, 0.0)}, 10.0)
    assert not condition.holds(ratios, budget, {}, 10.0)
    assert condition.holds(ratios, budget, {}, 0.0)  # the gate off


@given(objectives, st.floats(min_value=0.0, max_value=10.0), totals)
def test_min_bad_events_failures_alone_never_hold(
    objective: float, min_bad: float, total: float
) -> None:
    """Breaks if fewer than ``min_bad`` failures can make any condition hold, whatever
    the window's size: the gate's whole point (0.1 % fewer: floats at the very edge)."""
    budget = 1 - objective
    for condition in BURN_POLICY:
        bad = min(min_bad, total) * 0.999
        ratio = bad / total
        windows = {condition.long_window: total}
        ratios = _ratios(**{condition.long_window: ratio, condition.short_window: 1.0})
        assert not condition.holds(ratios, budget, windows, max(min_bad, 1e-9))


def test_evaluate_slo_gates_on_the_spec_min_bad_events() -> None:
    """Breaks if evaluate_slo ignores the spec's min_bad_events: 20 of 500 events (4 %)
    is 40× the budget, yet 500 < 695, so nothing fires; with the gate off the page does."""
    windows = {name: EventCounts(20, 500) for name in WINDOWS}
    gated = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0)
    status = evaluate_slo(gated, SliSource.CANARY, windows, EventCounts(20, 500))
    assert status.firing is None
    assert status.window_events["1h"] == 500
    ungated = SLOSpec("t", "m", SLOKind.AVAILABILITY, 0.999, 28 * 86400.0, min_bad_events=0)
    assert (
        evaluate_slo(ungated, SliSource.CANARY, windows, EventCounts(20, 500)).firing
        is (BURN_POLICY[0])
    )


def test_specs_carry_the_configured_min_bad_events() -> None:
    """Breaks if ``slo.alert_min_bad_events`` (default 10, per-model override) does not
    reach every SLO of the model."""
    config = parse_config(
        """
targets:
  - name: a
    url: http://h:8000
    models:
      - {name: m1}
      - {name: m2, slo: {alert_min_bad_events: 3, ttft: {threshold: 1s}}}
""",
        "inline.yaml",
    )
    found = {(s.model, s.kind): s.min_bad_events for s in slo_specs(config)}
    assert found == {
        ("m1", SLOKind.LATENCY): 10.0,
        ("m1", SLOKind.AVAILABILITY): 10.0,
        ("m2", SLOKind.LATENCY): 3.0,
        ("m2", SLOKind.AVAILABILITY): 3.0,
        ("m2", SLOKind.TTFT): 3.0,
    }
