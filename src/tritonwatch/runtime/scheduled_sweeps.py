"""The daemon's scheduled sweeps: one run of a plan, with the model's canary paused.

After the closed-loop (concurrency) steps, the capacity they found is checked with
open-loop request-rate steps of Poisson arrivals (:func:`check_open_loop`), under the
same pause.

A scheduled sweep loads a production server on purpose (:mod:`tritonwatch.sweep.schedule`
decides which models, how, and caps the levels), so the model's canary pauses while it
runs: the canary's SLI is not polluted by the sweep's queueing. The measured steps are
judged (:func:`~tritonwatch.analysis.sweep_verdict.judge_sweep`) and the result goes on
the :class:`~tritonwatch.records.sweep_records.SweepBoard` the exporter and the status page read.

A decoupled (generative) model is skipped with one ``sweep_skipped_streaming`` line: a
scheduled sweep sends plain infers, which such a model refuses, and judges them on the
latency SLO, which says nothing of TTFT or ITL. ``tritonwatch sweep`` streams from it
(:class:`~tritonwatch.sweep.stream_sweep.StreamSweepRunner`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from tritonwatch.analysis.capacity import (
    closed_loop_capacity,
    inferences_per_request,
    open_loop_capacity,
    open_loop_rates,
)
from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.common.logs import get_logger
from tritonwatch.records.sweep_records import (
    StepResult,
    SweepBoard,
    SweepResult,
    SweepSettings,
    SweepSteps,
)
from tritonwatch.sweep.schedule import SweepPlan

_log = get_logger("sweep")
PauseCanary = Callable[[str, str, bool], None]
"""(target, model, paused)."""
STREAMING_SKIPPED = (
    "decoupled model: scheduled sweeps send plain infers; "
    "run `tritonwatch sweep` for its TTFT, ITL and tokens/s"
)


def run_scheduled_sweep(
    plan: SweepPlan,
    board: SweepBoard,
    pause_canary: PauseCanary,
    stop: threading.Event,
    wall_clock: Callable[[], float],
) -> None:
    """Runs one plan with the model's canary paused; never raises (a job must not die)."""
    # Imported here, not at the top: the load generators (h2, the gRPC callbacks, the
    # stream transports) are only needed once a sweep runs, and a daemon without sweeps
    # should not carry their code (benchmarks/footprint.py: the daemon's RSS).
    from tritonwatch.sweep.load_sweep import SweepRunner  # noqa: PLC0415 - on use only
    from tritonwatch.sweep.stream_sweep import is_streaming  # noqa: PLC0415 - on use only

    try:
        streams = is_streaming(plan.settings)
    except Exception as error:  # an unreachable server or odd model: log, keep the daemon
        _log.warning("sweep_failed", target=plan.target, model=plan.model, error=str(error)[:300])
        return
    if streams:
        _log.warning(
            "sweep_skipped_streaming",
            target=plan.target,
            model=plan.model,
            reason=STREAMING_SKIPPED,
        )
        return
    pause_canary(plan.target, plan.model, True)
    _log.info(
        "sweep_started", target=plan.target, model=plan.model, levels=list(plan.settings.levels)
    )
    try:
        result = judge_sweep(SweepRunner(plan.settings, stop).run())
        if plan.open_loop_check:
            result = check_open_loop(result, lambda settings: SweepRunner(settings, stop).run())
    except Exception as error:  # an unreachable server or odd model: log, keep the daemon
        _log.warning("sweep_failed", target=plan.target, model=plan.model, error=str(error)[:300])
        return
    finally:
        pause_canary(plan.target, plan.model, False)
    board.record(plan.key, result, wall_clock())
    _log.info(
        "sweep_finished",
        target=plan.target,
        model=plan.model,
        knee=result.knee.concurrency if result.knee else None,
        operating_point=result.operating_point.level if result.operating_point else None,
        stopped_at_budget=result.stopped_at_budget,
        open_loop=[round(s.inferences_per_second, 3) for s in result.open_loop],
        warnings=list(result.warnings),
    )


def check_open_loop(result: SweepResult, run: Callable[[SweepSettings], SweepSteps]) -> SweepResult:
    """``result`` with its open-loop check: Poisson request-rate steps (the bursty
    arrivals of independent users, which queue where evenly spaced ones do not) from
    the closed loop's capacity downwards
    (:func:`~tritonwatch.analysis.capacity.open_loop_rates`), one level per run, until
    one holds its rate inside the budget. Unchanged when the sweep
    has no closed-loop capacity (no budget, every step over it)."""
    closed = closed_loop_capacity(result)
    budget = result.settings.budget_p95
    if closed is None or budget is None:
        return result
    steps: list[StepResult] = []
    for rate in open_loop_rates(closed, inferences_per_request(result.steps)):
        settings = dataclasses.replace(
            result.settings, mode="rate", levels=(rate,), arrivals="poisson"
        )
        steps.extend(run(settings).steps)
        if open_loop_capacity(steps, budget) is not None:
            break
    return dataclasses.replace(result, open_loop=tuple(steps), open_loop_checked=True)
