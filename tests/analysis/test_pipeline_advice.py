"""Advice for pipelines, Python models, decoupled models and cached windows: the change
goes to the step that makes the pipeline slow; Python is never told to use TensorRT; a
stream's own time is never network; a window with no execution gives no advice."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from pipeline_support import MS, issue_bls, issue_ensemble, rates
from tritonwatch.analysis.advice_blocked import BlockedReason, blocked_reason
from tritonwatch.analysis.advisor import advise
from tritonwatch.analysis.advisor_records import (
    REJECTED,
    Action,
    AdvisorInput,
    AdvisorThresholds,
    with_server_window,
)
from tritonwatch.analysis.pipeline_advice import advise_pipeline, window_breakdown
from tritonwatch.records.target_state import TargetState

LIMITS = AdvisorThresholds()


def _parent(target: TargetState, name: str, budget: float, p95: float) -> AdvisorInput:
    """The watched pipeline's input as the evaluator makes it: its window averages in."""
    model = target.models[name]
    assert model.rates is not None
    base = AdvisorInput(
        "t",
        name,
        budget,
        p95_seconds=p95,
        client_mean_seconds=(model.rates.request_seconds_average or 0.0) + 0.5 * MS,
        protocol="http",
        python_backend=model.config is not None and model.config.traits.python_backend,
    )
    return with_server_window(base, [model.rates])


def _windows(target: TargetState) -> dict[str, list]:  # type: ignore[type-arg]
    every = {**target.composing, **target.models}
    return {name: [m.rates] for name, m in every.items() if m.rates is not None}


def test_the_ensemble_over_budget_gets_cores_queue_delay_lowered() -> None:
    """Breaks if the ensemble gets no advice (the issue's silence), or anything but core's
    max_queue_delay_microseconds halved, named for the pipeline's SLO."""
    target = issue_ensemble()
    advice = advise_pipeline(
        _parent(target, "pipeline", 0.020, 0.031), LIMITS, state=target, windows=_windows(target)
    )
    assert [(r.model, r.action, r.current, r.proposed) for r in advice] == [
        ("core", Action.LOWER_QUEUE_DELAY, 20_000, 10_000)
    ]
    (lower,) = advice
    assert lower.pipeline == "pipeline" and lower.source == "pipeline"
    assert lower.parameter == "max_queue_delay_microseconds" and lower.config_change
    assert lower.reason.startswith(
        "pipeline's p95 31.0 ms is over its 20.0 ms budget and core's queue takes 64% of 31.5 ms"
    )
    assert lower.evidence["pipeline_p95_seconds"] == 0.031
    assert lower.evidence["queue_seconds"] == pytest.approx(20.1 * MS)


def test_the_ensemble_within_budget_gets_no_step_advice() -> None:
    target = issue_ensemble()
    advice = advise_pipeline(
        _parent(target, "pipeline", 0.050, 0.031), LIMITS, state=target, windows=_windows(target)
    )
    assert advice == []


def test_an_ensembles_own_numbers_give_only_network_and_queue_policy_advice() -> None:
    """The ensemble's compute is its steps': never optimize_model or reduce_io on it,
    even when its own numbers would say so; refused requests are still its own."""
    target = issue_ensemble()
    parent = _parent(target, "pipeline", 0.020, 0.031)
    loud = replace(
        parent,
        compute_input_seconds=15 * MS,
        compute_output_seconds=10 * MS,
        failures_per_second_by_reason={REJECTED: 2.0},
    )
    actions = [
        r.action for r in advise_pipeline(loud, LIMITS, state=target, windows=_windows(target))
    ]
    assert Action.REDUCE_IO in {r.action for r in advise(loud, LIMITS)}  # what it used to say
    assert Action.REDUCE_IO not in actions and Action.OPTIMIZE_MODEL not in actions
    assert Action.TUNE_QUEUE_POLICY in actions


def test_the_bls_model_gets_cores_queue_delay_and_never_optimize_model() -> None:
    """Breaks if the BLS model is told FP16/INT8/TensorRT (its 50 ms are core's waits),
    or its child is not told to batch less."""
    target = issue_bls()
    parent = _parent(target, "bls", 0.050, 0.054)
    assert parent.python_backend
    advice = advise_pipeline(parent, LIMITS, state=target, windows=_windows(target))
    assert [(r.model, r.action, r.proposed) for r in advice] == [
        ("core", Action.LOWER_QUEUE_DELAY, 10_000)
    ]
    assert advice[0].pipeline == "bls"
    assert "core's queue (×2 per request) takes" in advice[0].reason
    breakdown = window_breakdown(parent, target, _windows(target))
    assert breakdown is not None and breakdown.own == pytest.approx(2.0 * MS)


def test_a_step_advice_config_change_holds_back_the_pipelines_own() -> None:
    """One configuration change at a time: bls's own add_instance waits for core's."""
    target = issue_bls()
    parent = replace(
        _parent(target, "bls", 0.050, 0.054),
        queue_seconds=30 * MS,
        pending_requests=3.0,
        host_cpu_utilization=0.1,
        instance_kind="KIND_CPU",
        instance_count=1,
        max_batch_size=0,
    )
    assert Action.ADD_INSTANCE in {r.action for r in advise(parent, LIMITS)}
    advice = advise_pipeline(parent, LIMITS, state=target, windows=_windows(target))
    assert [(r.model, r.action) for r in advice if r.config_change] == [
        ("core", Action.LOWER_QUEUE_DELAY)
    ]


def test_a_plain_model_is_advised_as_before() -> None:
    target = issue_ensemble()
    core = target.composing["core"]
    assert core.rates is not None
    model = with_server_window(AdvisorInput("t", "core", 0.02, p95_seconds=0.03), [core.rates])
    assert advise_pipeline(model, LIMITS, state=target, windows={}) == advise(model, LIMITS)


def test_a_python_model_whose_compute_dominates_is_blocked_with_the_fix_named() -> None:
    """repeat_int32: over budget, 95 % compute, Python: no optimize_model; the blocked
    reason names what helps."""
    model = AdvisorInput(
        "t",
        "repeat_int32",
        0.05,
        p95_seconds=0.09,
        request_seconds=0.08,
        compute_infer_seconds=0.076,
        python_backend=True,
        instance_count=1,
        requests_per_second=5.0,
        executions_per_second=5.0,
    )
    assert Action.OPTIMIZE_MODEL in {r.action for r in advise(replace(model, python_backend=False))}
    advice = advise(model)
    assert advice == []
    reason = blocked_reason(
        model, LIMITS, bottleneck="compute-bound", burning=True, recommendations=advice
    )
    assert reason is BlockedReason.PROFILE_PYTHON
    assert reason == "declare_composing_models_or_profile_python"


def test_a_decoupled_models_stream_time_is_not_network() -> None:
    """square_int32: 13.4 ms between Triton's request and the stream's end is the
    model's own streaming: no reduce_network_overhead."""
    model = AdvisorInput(
        "t",
        "square_int32",
        0.05,
        p95_seconds=0.016,
        client_mean_seconds=0.0154,
        request_seconds=0.002,
        compute_infer_seconds=0.002,
    )
    assert {r.action for r in advise(model)} == {Action.REDUCE_NETWORK_OVERHEAD}
    assert advise(replace(model, streaming=True)) == []


def test_no_advice_from_a_window_that_never_executed() -> None:
    """Every request a cache hit: the window says nothing of the model's stages (today's
    reduce_io for a cached model); refused requests are still worth saying."""
    cached = rates("cached", 1.0, rps=20.0, executions=0.0, compute_input=0.4, compute_output=0.4)
    model = with_server_window(AdvisorInput("t", "cached", 0.05, p95_seconds=0.002), [cached])
    assert model.never_executed and model.executions_per_second == 0
    assert Action.REDUCE_IO in {
        r.action for r in advise(replace(model, executions_per_second=20.0))
    }
    assert advise(model) == []
    refused = replace(model, failures_per_second_by_reason={REJECTED: 1.0})
    assert [r.action for r in advise(refused)] == [Action.TUNE_QUEUE_POLICY]
    idle = replace(model, requests_per_second=0.0)
    assert not idle.never_executed  # no traffic is not "all cache hits"


@st.composite
def windows(draw: st.DrawFn) -> AdvisorInput:
    """Any window of a model: server time split among the stages in any proportions, a
    client gap of any size, any p95 against any budget, any GPU utilisation."""
    request = draw(st.floats(min_value=0.0, max_value=0.2))
    shares = [draw(st.floats(min_value=0.0, max_value=1.0)) for _ in range(4)]
    shares[draw(st.integers(min_value=0, max_value=3))] *= 4  # often one stage dominates
    total = sum(shares) or 1.0
    queue, infer, c_in, c_out = (request * share / total for share in shares)
    gap = draw(st.one_of(st.none(), st.floats(min_value=0.0, max_value=0.2)))
    return AdvisorInput(
        "t",
        "m",
        draw(st.floats(min_value=0.001, max_value=0.3)),
        p95_seconds=draw(st.one_of(st.none(), st.floats(min_value=0.0, max_value=0.5))),
        client_mean_seconds=None if gap is None else request + gap,
        request_seconds=request,
        queue_seconds=queue,
        compute_infer_seconds=infer,
        compute_input_seconds=c_in,
        compute_output_seconds=c_out,
        gpu_utilization=draw(st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0))),
        protocol=draw(st.sampled_from(["http", "grpc"])),
        python_backend=draw(st.booleans()),
        streaming=draw(st.booleans()),
    )


@given(windows())
def test_python_and_decoupled_models_never_get_tensorrt_or_network_advice(
    model: AdvisorInput,
) -> None:
    """Whatever the numbers: a Python model gets no optimize_model, a decoupled (streamed)
    one no reduce_network_overhead."""
    actions = {r.action for r in advise(model)}
    if model.python_backend:
        assert Action.OPTIMIZE_MODEL not in actions
    if model.streaming:
        assert Action.REDUCE_NETWORK_OVERHEAD not in actions


@pytest.mark.parametrize("action", [Action.OPTIMIZE_MODEL, Action.REDUCE_NETWORK_OVERHEAD])
def test_the_property_draws_windows_that_get_those_actions_otherwise(action: Action) -> None:
    """The property above can fail: with neither flag, its windows reach both rules."""
    plain = windows().map(lambda m: replace(m, python_backend=False, streaming=False))
    no_shrinking = settings(phases=[Phase.generate], max_examples=2000)  # any one will do
    found = find(plain, lambda m: action in {r.action for r in advise(m)}, settings=no_shrinking)
    assert action in {r.action for r in advise(found)}
