"""The concurrency (or request-rate) sweep, measured the way perf_analyzer measures.

Each step keeps a load level steady and measures in windows (a time span, or a
number of requests) until the last three agree within 10 % on throughput and the
chosen percentile, or ten windows have passed (then the step is reported as
unstable, not hidden). The step's numbers come from its last three windows, the
server's from the statistics API over the step. The sweep stops early once p95
exceeds the budget. It watches its own cost: a step whose load generator ran out of
CPU is re-measured with more worker processes, and if that is not possible the step
is flagged, so a flat curve caused by the client is not reported as the server's knee.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tritonwatch.kserve.payload import Tensor, build_inputs, input_specs
from tritonwatch.records.quantiles import nearest_rank
from tritonwatch.records.sweep_records import ServerBreakdown, StepResult, SweepSettings, SweepSteps
from tritonwatch.sweep.pool import cut_all, start_workers, stop_workers
from tritonwatch.sweep.spec import LoadSpec, grpc_load_spec, http_load_spec
from tritonwatch.sweep.stability import STABILITY_WINDOWS, WindowResult, is_stable
from tritonwatch.sweep.stats import StatsReader, breakdown
from tritonwatch.sweep.worker import WindowSamples, Worker
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import protocol_endpoint

GENERATOR_BOUND_UTILISATION = 0.85
"""A worker process busier than this is likely the bottleneck itself."""
WARM_UP_SECONDS = 0.5


ProgressCallback = Callable[[float, int, bool], None]
"""Called after every window: (level, windows so far, stable yet)."""


def model_info(settings: SweepSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's metadata and config in the HTTP API's shape, over the sweep's
    protocol (the config empty on a server without the config API).

    Raises:
        ApiError: the metadata or config could not be read.
    """
    endpoint = protocol_endpoint(settings.protocol, settings.url, settings.tls)
    client = ModelApiClient(endpoint, timeout=settings.timeout)
    try:
        metadata = client.model_metadata(settings.model, settings.version).document_or_raise()
        config = client.model_config(settings.model, settings.version).document_unless_missing()
    finally:
        client.close()
    return metadata, config or {}


def prepare_tensors(settings: SweepSettings) -> tuple[list[Tensor], int]:
    """The request tensors and the batch size each request carries."""
    metadata, config = model_info(settings)
    tensors = build_inputs(
        settings.model,
        input_specs(settings.model, metadata, config),
        settings.inputs,
        settings.data,
        string_length=settings.string_length,
        string_data=settings.string_data,
    )
    batching = int(config.get("max_batch_size", 0)) > 0
    batch = int(tensors[0].shape[0]) if batching and tensors[0].shape else 1
    return tensors, batch


def quantile_summary(values: Sequence[float], percentile: float) -> dict[str, float]:
    """p50, p90, p95, p99, ``percentile`` as ``pNN`` and ``avg`` of sorted ``values``
    (all 0 when there are none): a step's
    :attr:`~tritonwatch.records.sweep_records.StepResult.latency`."""
    levels = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, f"p{percentile:g}": percentile}
    summary = {
        name: nearest_rank(values, level / 100) if values else 0.0 for name, level in levels.items()
    }
    summary["avg"] = sum(values) / len(values) if values else 0.0
    return summary


def _spec(settings: SweepSettings, tensors: list[Tensor], level: float) -> LoadSpec:
    build = grpc_load_spec if settings.protocol == "grpc" else http_load_spec
    if settings.mode == "rate":
        spec = build(
            settings.url,
            settings.model,
            settings.version,
            tensors,
            mode="rate",
            concurrency=settings.rate_in_flight,
            rate=level,
            timeout=settings.timeout,
            tls=settings.tls,
        )
        return dataclasses.replace(spec, arrivals=settings.arrivals)
    return build(
        settings.url,
        settings.model,
        settings.version,
        tensors,
        mode="concurrency",
        concurrency=int(level),
        timeout=settings.timeout,
        tls=settings.tls,
    )


class SweepRunner:
    """Runs a sweep; ``stop`` (an event) ends it between windows (Ctrl-C, SIGTERM)."""

    def __init__(
        self,
        settings: SweepSettings,
        stop: threading.Event | None = None,
        gpu_probe: Callable[[], float | None] | None = None,
    ) -> None:
        self.settings = settings
        self.stop = stop or threading.Event()
        self._gpu_probe = gpu_probe
        """Reads the GPU utilisation at the end of each step, while its load still runs."""

    def run(self, progress: ProgressCallback | None = None) -> SweepSteps:
        settings = self.settings
        tensors, batch = prepare_tensors(settings)
        stats = StatsReader(
            settings.protocol, settings.url, settings.model, settings.version, settings.tls
        )
        steps: list[StepResult] = []
        warnings: list[str] = []
        stopped_at_budget = False
        processes = 1
        try:
            for level in settings.levels:
                if self.stop.is_set():
                    warnings.append("interrupted: the sweep did not finish")
                    break
                step = self._step(
                    tensors, batch, level, processes=processes, stats=stats, progress=progress
                )
                while self._more_processes_would_help(step, processes):
                    processes = min(settings.max_processes, processes * 2)
                    step = self._step(
                        tensors, batch, level, processes=processes, stats=stats, progress=progress
                    )
                if step.generator_bound:
                    warnings.append(
                        f"at {level:g} the load generator used {step.generator_utilisation:.0%} "
                        f"of its CPU with {step.processes} process(es): the curve may flatten "
                        "because of the client, not the server"
                    )
                steps.append(step)
                if settings.past_budget(step.p95):
                    stopped_at_budget = True
                    break
        finally:
            stats.close()
        return SweepSteps(settings, tuple(steps), stopped_at_budget, tuple(warnings))

    def _step(
        self,
        tensors: list[Tensor],
        batch: int,
        level: float,
        *,
        processes: int,
        stats: StatsReader,
        progress: ProgressCallback | None,
    ) -> StepResult:
        settings = self.settings
        concurrency = settings.rate_in_flight if settings.mode == "rate" else int(level)
        workers = start_workers(_spec(settings, tensors, level), min(processes, concurrency))
        try:
            self.stop.wait(WARM_UP_SECONDS)
            cut_all(workers)  # discard warm-up
            before = stats.snapshot()
            windows: list[WindowResult] = []
            samples: list[WindowSamples] = []
            while len(windows) < settings.max_windows and not self.stop.is_set():
                self._collect_window(workers, samples, windows)
                stable = is_stable(windows)
                if progress is not None:
                    progress(level, len(windows), stable)
                if stable:
                    break
            after = stats.snapshot()
            gpu = self._gpu_probe() if self._gpu_probe is not None else None
        finally:
            stop_workers(workers)
        server = breakdown(before, after) if before and after else None
        step = _step_result(
            level,
            batch,
            samples,
            windows,
            processes=len(workers),
            percentile=settings.percentile,
            server=server,
        )
        return replace(step, gpu_utilization=gpu)

    def _more_processes_would_help(self, step: StepResult, processes: int) -> bool:
        return (
            step.generator_bound
            and processes < self.settings.max_processes
            and processes < step.level
            and not self.stop.is_set()
        )

    def _collect_window(
        self, workers: list[Worker], samples: list[WindowSamples], windows: list[WindowResult]
    ) -> None:
        settings = self.settings
        if settings.window_requests is None:
            self.stop.wait(settings.window_seconds)
            window = cut_all(workers)
        else:  # count mode: keep collecting until the window holds enough requests
            window = WindowSamples(workers=0)
            deadline = time.monotonic() + settings.timeout
            while len(window.latencies) < settings.window_requests and time.monotonic() < deadline:
                if self.stop.wait(0.1):
                    break
                window = window.merge(cut_all(workers)) if window.workers else cut_all(workers)
        samples.append(window)
        latencies = sorted(window.latencies)
        throughput = len(latencies) / window.wall_seconds if window.wall_seconds > 0 else 0.0
        chosen = nearest_rank(latencies, settings.percentile / 100) if latencies else 0.0
        windows.append(WindowResult(throughput, chosen))


def _step_result(
    level: float,
    batch: int,
    samples: list[WindowSamples],
    windows: list[WindowResult],
    *,
    processes: int,
    percentile: float,
    server: ServerBreakdown | None,
) -> StepResult:
    used = samples[-STABILITY_WINDOWS:] or [WindowSamples()]  # stopped before any window
    merged = used[0]
    for window in used[1:]:
        merged = merged.merge(window)
    wall = sum(w.wall_seconds for w in used)
    latencies = sorted(merged.latencies)
    requests = len(latencies)
    failed = merged.errors + merged.timeouts
    cpu = sum(w.cpu_seconds for w in used)
    latency = quantile_summary(latencies, percentile)
    mean = latency["avg"]
    rate = requests / wall if wall > 0 else 0.0
    per_request_cpu = cpu / requests if requests else 0.0
    utilisation = cpu / (wall * processes) if wall > 0 else 0.0
    return StepResult(
        level=level,
        requests_per_second=rate,
        inferences_per_second=rate * batch,
        latency=latency,
        requests=requests,
        errors=failed,
        error_rate=failed / (requests + failed) if requests + failed else 0.0,
        stable=is_stable(windows),
        windows=len(windows),
        processes=processes,
        client_cpu_per_request=per_request_cpu,
        client_latency_share=per_request_cpu / mean if mean > 0 else 0.0,
        generator_utilisation=utilisation,
        generator_bound=utilisation >= GENERATOR_BOUND_UTILISATION,
        server=server,
        window_throughputs=tuple(
            len(w.latencies) * batch / w.wall_seconds for w in used if w.wall_seconds > 0
        ),
        latency_samples=tuple(latencies),
    )
