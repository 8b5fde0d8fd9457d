"""A sweep measured in process on a virtual-time simulator: exact inputs for the tuner.

The tuner's real sweep drives the server through sockets on real time, so what it
measures (and so which changes it keeps) moves with the host. This one runs each level's
closed loop in process on the simulator's virtual time, and reads the server breakdown
through the statistics API over HTTP as ``SweepRunner`` does: the same simulated
server, measured without the host in the numbers.
"""

from __future__ import annotations

from collections.abc import Callable

from tritonwatch.records.sweep_records import ServerBreakdown, StepResult, SweepSettings, SweepSteps
from tritonwatch.sim.load import LoadResult, closed_loop
from tritonwatch.sim.server import Simulator
from tritonwatch.sweep.load_sweep import quantile_summary
from tritonwatch.sweep.stats import StatsReader, breakdown

WINDOWS = 3
"""Windows per step, as many as the real runner's stability check compares."""
WARM_UP_S = 0.5


def _step(
    level: float, windows: list[LoadResult], percentile: float, server: ServerBreakdown | None
) -> StepResult:
    latencies = sorted(latency for window in windows for latency in window.latencies_s)
    wall = sum(window.elapsed_s for window in windows)
    errors = sum(window.failed for window in windows)
    rate = len(latencies) / wall if wall > 0 else 0.0
    return StepResult(
        level=level,
        requests_per_second=rate,
        inferences_per_second=rate,
        latency=quantile_summary(latencies, percentile),
        requests=len(latencies),
        errors=errors,
        error_rate=errors / (len(latencies) + errors) if latencies or errors else 0.0,
        stable=True,
        windows=len(windows),
        processes=1,
        client_cpu_per_request=0.0,
        client_latency_share=0.0,
        generator_utilisation=0.0,
        generator_bound=False,
        server=server,
        window_throughputs=tuple(window.throughput for window in windows),
        latency_samples=tuple(latencies),
    )


def in_process_sweep(sim: Simulator) -> Callable[[SweepSettings], SweepSteps]:
    """A ``Tuner(measure=...)`` sweeping ``sim`` (started with ``clock="virtual"``) in
    process: per level a warm-up, then :data:`WINDOWS` windows of ``window_seconds``."""

    def measure(settings: SweepSettings) -> SweepSteps:
        stats = StatsReader("http", settings.url, settings.model, settings.version)
        steps: list[StepResult] = []
        stopped_at_budget = False

        def window(level: float, seconds: float) -> LoadResult:
            return sim.run_async(
                lambda core: closed_loop(
                    core, settings.model, concurrency=int(level), duration_s=seconds
                )
            )

        try:
            for level in settings.levels:
                window(level, WARM_UP_S)
                before = stats.snapshot()
                windows = [window(level, settings.window_seconds) for _ in range(WINDOWS)]
                after = stats.snapshot()
                server = breakdown(before, after) if before and after else None
                step = _step(level, windows, settings.percentile, server)
                steps.append(step)
                if settings.past_budget(step.p95):
                    stopped_at_budget = True
                    break
        finally:
            stats.close()
        return SweepSteps(settings, tuple(steps), stopped_at_budget, ())

    return measure
