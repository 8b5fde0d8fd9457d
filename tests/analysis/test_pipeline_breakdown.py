"""A pipeline's step breakdown and its bottleneck, on hand-made windows with known answers:
the issue's ensemble and BLS model, parallel branches, nested ensembles, shared steps."""

from __future__ import annotations

import pytest

from pipeline_support import (
    MS,
    ensemble_config,
    issue_bls,
    issue_ensemble,
    python_config,
    rates,
    snapshot,
    state,
)
from tritonwatch.analysis.breakdown import BottleneckThresholds, judge_target, latency_breakdown
from tritonwatch.analysis.pipeline_breakdown import step_bottleneck, step_breakdown
from tritonwatch.analysis.pipeline_shape import (
    Reading,
    calls_per_request,
    pipeline_shape,
    pipeline_shapes,
)
from tritonwatch.records.model_traits import ensemble_step_counts
from tritonwatch.records.target_state import ModelState, StepBreakdown, StepTime, TargetState


def _steps(target_state: TargetState | None = None, name: str = "pipeline") -> StepBreakdown:
    target_state = target_state or issue_ensemble()
    judged = judge_target(target_state, {name: BottleneckThresholds.for_budget(0.02)})
    steps = judged.models[name].steps
    assert steps is not None
    return steps


def test_the_issues_ensemble_lists_every_step_and_names_cores_queue() -> None:
    """Breaks if the ensemble still reads as 20 ms of server_other and "balanced": each
    step's queue and compute per request, the pipeline's own remainder, and the
    bottleneck named in the step."""
    judged = judge_target(issue_ensemble(), {"pipeline": BottleneckThresholds.for_budget(0.02)})
    pipeline = judged.models["pipeline"]
    steps = pipeline.steps
    assert steps is not None and steps.kind == "ensemble"
    assert [s.step for s in steps.steps] == ["prep", "core", "post"]
    core = steps.step("core")
    assert core is not None and core.calls == 1 and not core.calls_estimated
    assert core.queue == pytest.approx(20.1 * MS)
    assert core.compute_infer == pytest.approx(5.15 * MS)
    assert core.total == pytest.approx(25.4 * MS)
    assert [s.total for s in steps.steps] == pytest.approx([3.4 * MS, 25.4 * MS, 1.5 * MS])
    assert steps.own == pytest.approx((31.0 - 3.4 - 25.4 - 1.5) * MS)
    assert not steps.parallel and steps.missing == ()
    neck = pipeline.bottleneck
    assert neck is not None
    assert (neck.kind, neck.step) == ("queue-bound", "core")
    assert neck.reason.startswith("core's queue takes 65% of 31.0 ms per request")
    # The ensemble's own breakdown is unchanged: its stages still add up to its request.
    assert pipeline.breakdown is not None
    assert pipeline.breakdown.server_other == pytest.approx((31.0 - 10.0) * MS)
    assert set(neck.shares) == set(pipeline.breakdown.stages())


def test_the_network_counts_in_the_total_when_the_canary_measured_it() -> None:
    """With a canary mean of 40 ms, core's 20.1 ms queue is 50 % of 40 ms: not over half."""
    target = issue_ensemble()
    pipeline = target.models["pipeline"]
    with_canary = ModelState(
        "pipeline", pipeline.rates, config=pipeline.config, canary_mean_seconds=40.2 * MS
    )
    judged = judge_target(state({"pipeline": with_canary}, target.composing))
    neck = judged.models["pipeline"].bottleneck
    assert neck is not None and neck.kind == "balanced" and neck.step == ""
    assert "core's queue takes 50% of 40.2 ms" in neck.reason


def test_a_short_queue_is_not_worth_acting_on() -> None:
    """The same shares under a 200 ms budget: 20.1 ms is under 20 % of it (40 ms)."""
    judged = judge_target(issue_ensemble(), {"pipeline": BottleneckThresholds.for_budget(0.2)})
    neck = judged.models["pipeline"].bottleneck
    assert neck is not None and neck.kind == "balanced"
    assert "under the 40.0 ms worth acting on" in neck.reason


def test_parallel_branches_overlap_and_own_time_is_zero() -> None:
    """Two 10 ms branches run side by side under a 10.5 ms request: the steps add up to
    20 ms, more than the request, so they are marked parallel and nothing is left over."""
    config = {
        **ensemble_config("fork", ["left", "right"]),
    }
    target = state(
        {"fork": ModelState("fork", rates=rates("fork", 10.5), config=snapshot(config))},
        {
            name: ModelState(
                name,
                rates=rates(name, 10.0, compute_infer=10.0),
                config=snapshot(python_config(name)),
            )
            for name in ("left", "right")
        },
    )
    steps = _steps(target, "fork")
    assert steps.parallel and steps.own == 0.0
    assert sum(s.total for s in steps.steps) == pytest.approx(20.0 * MS)
    neck = judge_target(target).models["fork"].bottleneck
    assert neck is not None and (neck.kind, neck.step) == ("compute-bound", "left")
    assert "parallel branches" in neck.reason


def test_nested_ensembles_are_flattened_into_the_models_that_execute() -> None:
    """outer = prep → inner → post, inner = core → core: the steps are prep, core (twice
    per request) and post; the inner ensemble's own hand-offs stay in outer's own time."""
    composing = {
        "inner": ModelState(
            "inner",
            rates=rates("inner", 51.0),
            config=snapshot(ensemble_config("inner", ["core", "core"])),
        ),
        "prep": ModelState("prep", rates=rates("prep", 3.0, compute_infer=3.0)),
        "core": ModelState("core", rates=rates("core", 25.0, queue=20.0, compute_infer=5.0)),
        "post": ModelState("post", rates=rates("post", 1.0, compute_infer=1.0)),
    }
    outer = ModelState(
        "outer",
        rates=rates("outer", 56.0),
        config=snapshot(ensemble_config("outer", ["prep", "inner", "post"])),
    )
    target = state({"outer": outer}, composing)
    shape = pipeline_shape("outer", target)
    assert shape is not None and shape.steps == (("prep", 1.0), ("core", 2.0), ("post", 1.0))
    steps = _steps(target, "outer")
    core = steps.step("core")
    assert core is not None and core.queue == pytest.approx(40.0 * MS)
    assert steps.own == pytest.approx((56.0 - 3.0 - 50.0 - 1.0) * MS)


def test_a_loop_between_ensemble_configs_ends() -> None:
    """a's step is b and b's step is a (a broken repository): the walk stops."""
    composing = {"b": ModelState("b", config=snapshot(ensemble_config("b", ["a", "x"])))}
    a = ModelState("a", rates=rates("a", 5.0), config=snapshot(ensemble_config("a", ["b"])))
    shape = pipeline_shape("a", state({"a": a}, composing))
    assert shape is not None and dict(shape.steps) == {"a": 1.0, "x": 1.0}


def test_a_model_named_by_two_steps_runs_twice() -> None:
    raw = ensemble_config("twice", ["prep", "prep", "post"])
    assert ensemble_step_counts(raw) == {"prep": 2, "post": 1}


def test_a_step_without_readings_is_listed_as_missing() -> None:
    target = issue_ensemble()
    composing = dict(target.composing)
    composing["post"] = ModelState("post", config=composing["post"].config)  # no rates
    steps = _steps(state(target.models, composing))
    assert steps.missing == ("post",)
    assert [s.step for s in steps.steps] == ["prep", "core"]


def test_bls_children_are_split_out_of_the_parents_compute() -> None:
    """bls (52 ms) calls core (25 ms, 20 of it queue) twice: core's 40 requests/s over
    bls's 20 make 2 calls, not an estimate (no other caller); 2 ms is bls's own."""
    judged = judge_target(issue_bls(), {"bls": BottleneckThresholds.for_budget(0.05)})
    bls = judged.models["bls"]
    steps = bls.steps
    assert steps is not None and steps.kind == "bls"
    core = steps.step("core")
    assert core is not None
    assert core.calls == pytest.approx(2.0) and not core.calls_estimated
    assert core.queue == pytest.approx(40.0 * MS)
    assert core.total == pytest.approx(50.0 * MS)
    assert steps.own == pytest.approx(2.0 * MS)
    neck = bls.bottleneck
    assert neck is not None and (neck.kind, neck.step) == ("queue-bound", "core")
    assert neck.reason.startswith("core's queue (×2 per request) takes 77% of 52.0 ms")


def test_a_bls_parents_own_python_is_compute_bound() -> None:
    """A child that answers in 1 ms: the parent's own 50 ms of Python is the bottleneck."""
    target = issue_bls()
    core = ModelState("core", rates=rates("core", 1.0, rps=40.0, compute_infer=1.0))
    neck = judge_target(state(target.models, {"core": core})).models["bls"].bottleneck
    assert neck is not None and (neck.kind, neck.step) == ("compute-bound", "")
    assert neck.reason.startswith("bls's own Python takes 96%")


def _calls(
    target: TargetState, parent: str, child: str, canary: dict[str, float] | None = None
) -> tuple[float | None, bool]:
    shapes = pipeline_shapes(target)
    readings = {
        name: Reading.of_rates(model.rates)
        for name, model in (*target.composing.items(), *target.models.items())
    }
    return calls_per_request(parent, child, shapes, readings, canary or {})


def test_bls_calls_subtract_the_callers_we_know_and_say_it_is_an_estimate() -> None:
    """core serves the ensemble (20/s × 1), our canary on core (5/s) and bls (10/s):
    (55 − 20 − 5) / 10 = 3 calls per bls request, an estimate."""
    ensemble = issue_ensemble().models["pipeline"]
    bls = ModelState(
        "bls",
        rates=rates("bls", 80.0, rps=10.0),
        composing_models=("core",),
        config=snapshot(python_config("bls")),
    )
    core = ModelState("core", rates=rates("core", 25.0, rps=55.0, queue=20.0, compute_infer=5.0))
    target = state({"pipeline": ensemble, "bls": bls, "core": core}, issue_ensemble().composing)
    assert _calls(target, "bls", "core", {"core": 5.0}) == (pytest.approx(3.0), True)
    assert _calls(target, "pipeline", "core") == (1.0, False)  # an ensemble's count is exact


def test_two_bls_parents_share_a_child_in_proportion_to_their_rates() -> None:
    """a (10/s) and b (30/s) both declare core (80/s): 2 calls each, an estimate."""
    parents = {
        name: ModelState(name, rates=rates(name, 60.0, rps=rps), composing_models=("core",))
        for name, rps in (("a", 10.0), ("b", 30.0))
    }
    core = ModelState("core", rates=rates("core", 25.0, rps=80.0))
    target = state(parents, {"core": core})
    assert _calls(target, "a", "core") == (pytest.approx(2.0), True)


def test_a_bls_child_not_read_yet_leaves_the_remainder_unnamed() -> None:
    """Before the child's first window the parent's remainder holds the child's time: it
    is no "own Python" to profile."""
    target = issue_bls()
    core = ModelState("core", config=target.composing["core"].config)  # no rates yet
    bls = judge_target(state(target.models, {"core": core})).models["bls"]
    assert bls.steps is not None and bls.steps.missing == ("core",)
    assert bls.bottleneck is not None and bls.bottleneck.kind == "balanced"
    assert "bls's own time (with core, not read) takes" in bls.bottleneck.reason


def test_no_calls_without_parent_traffic() -> None:
    target = issue_bls(bls_rps=0.0)
    assert _calls(target, "bls", "core") == (None, False)
    assert _steps(target, "bls").missing == ("core",)


def test_a_model_that_is_no_pipeline_gets_no_step_breakdown() -> None:
    plain = ModelState("m", rates=rates("m", 5.0), config=snapshot(python_config("m")))
    judged = judge_target(state({"m": plain}))
    assert judged.models["m"].steps is None
    assert judged.models["m"].bottleneck is not None and judged.models["m"].bottleneck.step == ""


def test_the_step_bottleneck_rule_on_a_hand_made_breakdown() -> None:
    """I/O of a step dominates: io-bound, named in the step."""
    step = StepTime("pre", 1.0, False, 0.0, 6 * MS, 1 * MS, 4 * MS, 0.0)
    breakdown = StepBreakdown("ensemble", (step,), 12 * MS, 0.0, 1 * MS, False)
    neck = step_bottleneck("p", breakdown, None, shares={}, dominant_share=0.5)
    assert (neck.kind, neck.step) == ("io-bound", "pre")
    assert neck.reason.startswith("pre's compute_input + compute_output takes 83% of 12.0 ms")


def test_step_breakdown_of_a_model_without_requests_is_none() -> None:
    target = issue_ensemble()
    shapes = pipeline_shapes(target)
    assert step_breakdown("pipeline", shapes, {"pipeline": Reading()}, {}) is None


def test_a_decoupled_model_has_no_network_stage() -> None:
    """End to end minus server is a decoupled model's own streaming, never network."""
    window = rates("square_int32", 2.0, compute_infer=2.0)
    decoupled = latency_breakdown(window, 15.4 * MS, decoupled=True)
    plain = latency_breakdown(window, 15.4 * MS)
    assert decoupled is not None and decoupled.network_client is None
    assert plain is not None and plain.network_client == pytest.approx(13.4 * MS)
    streamed = ModelState(
        "square_int32",
        rates=window,
        config=snapshot(python_config("square_int32", decoupled=True)),
        canary_mean_seconds=15.4 * MS,
    )
    judged = judge_target(state({"square_int32": streamed})).models["square_int32"]
    assert judged.breakdown is not None and judged.breakdown.network_client is None
    assert judged.bottleneck is not None and judged.bottleneck.kind != "network-bound"
