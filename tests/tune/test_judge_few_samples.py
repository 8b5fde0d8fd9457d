"""tune's judge when a sweep measured too few requests at an operating point."""

from __future__ import annotations

from dataclasses import replace

from tritonwatch.commands.tune.judge import Verdict, judge
from tritonwatch.records.sweep_records import StepResult, SweepResult, SweepSettings


def _step(samples: int) -> StepResult:
    latency = {"p50": 0.004, "p90": 0.005, "p95": 0.006, "p99": 0.008, "avg": 0.0045}
    return StepResult(
        level=1, requests_per_second=200.0, inferences_per_second=200.0, latency=latency,
        requests=samples, errors=0, error_rate=0.0, stable=True, windows=3, processes=1,
        client_cpu_per_request=0.0001, client_latency_share=0.02, generator_utilisation=0.2,
        generator_bound=False, server=None, window_throughputs=(200.0, 201.0, 199.0),
        latency_samples=tuple(0.004 + i * 1e-6 for i in range(samples)),
    )  # fmt: skip


def _sweep(step: StepResult) -> SweepResult:
    settings = SweepSettings(url="http://127.0.0.1:1", model="m", levels=(1,), budget_p95=0.05)
    return SweepResult(settings, (step,), None, step, False, ())


def test_too_few_requests_at_an_operating_point_is_inconclusive_not_a_crash() -> None:
    """Breaks if tune crashes (ValueError from the bootstrap comparison, seen on a
    starved CI host) when a sweep measured fewer than 20 requests at the point it
    compares, instead of calling the step inconclusive."""
    plenty, few = _step(200), _step(12)
    verdict = judge(_sweep(plenty), _sweep(few))
    assert verdict.verdict == Verdict.INCONCLUSIVE
    assert "too few requests" in verdict.reason
    assert judge(_sweep(few), _sweep(replace(plenty))).verdict == Verdict.INCONCLUSIVE
