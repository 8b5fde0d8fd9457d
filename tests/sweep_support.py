"""Judged sweep results built from hand-made steps, for report and candidate tests."""

from __future__ import annotations

from collections.abc import Sequence

from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.records.sweep_records import (
    ServerBreakdown,
    StepResult,
    SweepResult,
    SweepSettings,
    SweepSteps,
)


def judged(
    settings: SweepSettings,
    steps: Sequence[StepResult],
    stopped_at_budget: bool = False,
    warnings: Sequence[str] = (),
) -> SweepResult:
    """What ``judge_sweep`` concludes from these steps, as if a runner had measured them."""
    return judge_sweep(SweepSteps(settings, tuple(steps), stopped_at_budget, tuple(warnings)))


def quantiles(p95: float) -> dict[str, float]:
    """A step's quantiles around ``p95`` (p50 half of it, p99 a fifth over)."""
    return {"p50": p95 / 2, "p90": p95 * 0.9, "p95": p95, "p99": p95 * 1.2, "avg": p95 / 2}


def stream_step(level: float, *, tokens_per_second: float, requests_per_second: float,
                ttft_p95: float, itl_p95: float, latency_p95: float = 1.0) -> StepResult:  # fmt: skip
    """A streaming sweep's step, as :class:`~tritonwatch.sweep.stream_sweep.StreamSweepRunner`
    fills one: 100 streams, TTFT/ITL (and the per-request ITL, equal to ITL) around their p95."""
    return StepResult(
        level=level, requests_per_second=requests_per_second,
        inferences_per_second=requests_per_second, latency=quantiles(latency_p95),
        requests=100, errors=0, error_rate=0.0, stable=True, windows=3, processes=1,
        client_cpu_per_request=0.0001, client_latency_share=0.01, generator_utilisation=0.2,
        generator_bound=False, server=None, ttft=quantiles(ttft_p95), itl=quantiles(itl_p95),
        itl_per_request=quantiles(itl_p95), output_tokens_per_second=tokens_per_second,
    )  # fmt: skip


def plain_step(
    level: float,
    rps: float,
    p95: float,
    *,
    batch: float = 1.0,
    compute: float | None = None,
    requests: int = 300,
) -> StepResult:
    """A plain (non-streaming) step that completed ``requests`` at ``rps`` requests/s
    (``batch`` rows each), its p95 ``p95``; with ``compute``, a server breakdown whose
    requests each computed that long (Triton's ``compute_infer``)."""
    server = None
    if compute is not None:
        stages = {"queue": 0.0, "compute_infer": compute}
        server = ServerBreakdown(requests, compute, stages, batch)
    return StepResult(
        level=level,
        requests_per_second=rps,
        inferences_per_second=rps * batch,
        latency=quantiles(p95),
        requests=requests,
        errors=0,
        error_rate=0.0,
        stable=True,
        windows=3,
        processes=1,
        client_cpu_per_request=0.0001,
        client_latency_share=0.01,
        generator_utilisation=0.1,
        generator_bound=False,
        server=server,
    )


# Two instances of a 4 ms model, no batching: capacity ≈ 2 / 4 ms, reached by concurrency 2-4.
TWO_INSTANCES = {
    "timing": {
        "compute_input": 0, "compute_input_per_item": 0, "compute_output": 0,
        "compute_output_per_item": 0, "compute_infer": "4ms", "compute_infer_per_item": 0,
        "noise_sigma": 0.0,
    },
    "dynamic_batching": None,
    "instance_group": {"count": 2, "kind": "KIND_GPU", "gpus": [0]},
    "gpu_occupancy": {"base": 0.3, "per_item": 0},
}  # fmt: skip


def tune_settings(
    url: str,
    model: str,
    budget: float,
    levels: tuple[float, ...] = (1, 2, 4, 8),
    window: float = 0.3,
) -> SweepSettings:
    """Short sweeps for the tuner's tests: four windows at most per level."""
    return SweepSettings(url=url, model=model, levels=levels, budget_p95=budget,
                         window_seconds=window, max_windows=4)  # fmt: skip
