"""The concurrency sweep of a streaming model: TTFT, ITL and output tokens/s per level.

A decoupled model answers a plain infer with an error, and its whole-request latency
grows with the tokens asked for, so :class:`~tritonwatch.sweep.load_sweep.SweepRunner`
cannot measure it. This runner keeps ``level`` streams in flight (closed loop: each
asyncio worker sends its next stream when the last one ends) on the streaming canary's
codecs and transports of its own (:func:`~tritonwatch.sweep.stream_transports.open_transport`:
generate_stream and OpenAI over the lean HTTP/1.1 pool, gRPC over one long-lived
``ModelStreamInfer`` call) and times every stream with the canary's
:class:`~tritonwatch.probe.stream_timing.StreamClock`, so a sweep's TTFT and ITL are
the canary's (docs/design.md §5).

It measures as the plain sweep does: windows until the last three agree within 10 %
(:mod:`tritonwatch.sweep.stability`) on output tokens/s and the chosen percentile of
``settings.measure`` (TTFT or ITL), at most ``max_windows``; the step's numbers come from
its last three windows, the server's breakdown from the statistics API (none for an
OpenAI server), and the sweep stops once the measure's p95 passes the budget. One event
loop sends every stream, so there is no scale-out: a step whose loop was busier than
:data:`~tritonwatch.sweep.load_sweep.GENERATOR_BOUND_UTILISATION` is flagged client-bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tritonwatch.kserve.stream_request import PromptSampler
from tritonwatch.probe.canary.clients import classify_error, error_text
from tritonwatch.probe.canary.model_info import is_decoupled
from tritonwatch.probe.stream.stream_canary import (
    kserve_codec,
    openai_codec,
    openai_root,
    prompt_sampler,
    stream_fields,
)
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.records.quantiles import nearest_rank
from tritonwatch.records.sweep_records import (
    Measure,
    ServerBreakdown,
    StepResult,
    SweepSettings,
    SweepSteps,
)
from tritonwatch.sweep.load_sweep import (
    GENERATOR_BOUND_UTILISATION,
    WARM_UP_SECONDS,
    ProgressCallback,
    model_info,
    quantile_summary,
)
from tritonwatch.sweep.stability import STABILITY_WINDOWS, WindowResult, is_stable
from tritonwatch.sweep.stats import StatsReader, StatsSnapshot, breakdown
from tritonwatch.sweep.stream_transports import StreamTransport, open_transport

POLL_SECONDS = 0.05
"""How often a wait looks at the stop event and a counted window at its count."""
CLOSE_SECONDS = 2.0
"""How long closing the transport and the workers may take (bounded shutdown)."""
SEED = 0
"""Prompts are the same from run to run, so two sweeps of one model compare."""


def is_streaming(settings: SweepSettings) -> bool:
    """Whether ``settings`` need this runner: protocol ``openai``, or a model whose
    config says ``decoupled`` (read over the sweep's protocol, as the plain sweep reads
    the metadata)."""
    return settings.protocol == "openai" or is_decoupled(model_info(settings)[1])


@dataclass(slots=True)
class StreamWindow:
    """The streams that ended within one window, and what sending them cost."""

    results: list[StreamResult] = field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0

    def merge(self, other: StreamWindow) -> StreamWindow:
        return StreamWindow(
            self.results + other.results,
            self.wall_seconds + other.wall_seconds,
            self.cpu_seconds + other.cpu_seconds,
        )

    @property
    def successes(self) -> list[StreamResult]:
        return [r for r in self.results if r.outcome == Outcome.SUCCESS]

    @property
    def output_tokens(self) -> int:
        """Every token delivered, a failed stream's too (the server generated them)."""
        return sum(r.output_tokens for r in self.results)

    def values(self, measure: Measure) -> list[float]:
        """The window's successful streams' samples of ``measure``, sorted: one TTFT or
        whole-stream latency per stream, one ITL per gap."""
        ok = self.successes
        if measure == "ttft":
            return sorted(r.ttft_seconds for r in ok if r.ttft_seconds is not None)
        if measure == "itl":
            return sorted(gap for r in ok for gap in r.gaps_seconds)
        return sorted(r.total_seconds for r in ok if r.total_seconds is not None)


class _Recorder:
    """Collects finished streams; :meth:`cut` hands over those since the last cut."""

    def __init__(self) -> None:
        self._window = StreamWindow()
        self._wall = time.monotonic()
        self._cpu = time.process_time()

    def add(self, result: StreamResult) -> None:
        self._window.results.append(result)

    @property
    def count(self) -> int:
        return len(self._window.results)

    def cut(self) -> StreamWindow:
        wall, cpu = time.monotonic(), time.process_time()
        window, self._window = self._window, StreamWindow()
        window.wall_seconds, window.cpu_seconds = wall - self._wall, cpu - self._cpu
        self._wall, self._cpu = wall, cpu
        return window


class StreamSweepRunner:
    """Runs a streaming sweep; ``stop`` (an event) ends it between windows."""

    def __init__(self, settings: SweepSettings, stop: threading.Event | None = None) -> None:
        """Raises: ValueError: a rate sweep, or a plain measure (streaming is closed-loop,
        judged on TTFT or ITL)."""
        if settings.mode != "concurrency":
            raise ValueError("a streaming sweep runs concurrency levels, not request rates")
        if settings.measure == "latency":
            raise ValueError("a streaming sweep is judged on ttft or itl, not latency")
        self.settings = settings
        self.stop = stop or threading.Event()

    def run(self, progress: ProgressCallback | None = None) -> SweepSteps:
        """Measures every level in turn.

        Raises:
            PayloadError: the model's inputs cannot be built.
        """
        return asyncio.run(self._run(progress))

    async def _run(self, progress: ProgressCallback | None) -> SweepSteps:
        settings = self.settings
        transport = await self._transport()
        stats = None
        if settings.protocol != "openai":
            stats = StatsReader(
                settings.protocol, settings.url, settings.model, settings.version, settings.tls
            )
        sampler = prompt_sampler(SEED, settings.stream)
        steps: list[StepResult] = []
        warnings: list[str] = []
        stopped_at_budget = False
        try:
            for level in settings.levels:
                if self.stop.is_set():
                    warnings.append("interrupted: the sweep did not finish")
                    break
                step = await self._step(transport, sampler, level, stats, progress)
                if step.generator_bound:
                    warnings.append(
                        f"at {level:g} the sweep's event loop used "
                        f"{step.generator_utilisation:.0%} of a CPU: the curve may flatten "
                        "because of the client, not the server"
                    )
                steps.append(step)
                budget = settings.budget_p95
                if budget is not None and step.quantiles(settings.measure)["p95"] > budget:
                    stopped_at_budget = True
                    break
        finally:
            with contextlib.suppress(Exception, TimeoutError):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await transport.close()
            if stats is not None:
                stats.close()
        return SweepSteps(settings, tuple(steps), stopped_at_budget, tuple(warnings))

    async def _transport(self) -> StreamTransport:
        """The canary's transport for the settings, opened on this loop (grpc.aio's
        channel belongs to the loop it was made on); the model's config is read aside."""
        settings = self.settings
        fields = stream_fields(settings.stream, settings.served_name)
        limit = int(max(settings.levels))
        if settings.protocol == "openai":
            root = openai_root(settings.url)  # a URL given as OpenAI clients take it, …/v1
            return open_transport(root, settings.tls, limit, openai_codec(settings, fields))
        metadata, config = await asyncio.to_thread(model_info, settings)
        codec = kserve_codec(settings, fields, metadata, config)
        return open_transport(settings.url, settings.tls, limit, codec)

    async def _snapshot(self, stats: StatsReader | None) -> StatsSnapshot | None:
        return None if stats is None else await asyncio.to_thread(stats.snapshot)

    async def _step(
        self,
        transport: StreamTransport,
        sampler: PromptSampler,
        level: float,
        stats: StatsReader | None,
        progress: ProgressCallback | None,
    ) -> StepResult:
        settings = self.settings
        recorder = _Recorder()
        workers = [
            asyncio.create_task(self._worker(transport, sampler, recorder), name="stream-sweep")
            for _ in range(int(level))
        ]
        try:
            await self._wait(WARM_UP_SECONDS)
            recorder.cut()  # discard warm-up
            before = await self._snapshot(stats)
            windows: list[WindowResult] = []
            samples: list[StreamWindow] = []
            while len(windows) < settings.max_windows and not self.stop.is_set():
                window = await self._window(recorder)
                samples.append(window)
                windows.append(_window_result(window, settings))
                stable = is_stable(windows)
                if progress is not None:
                    progress(level, len(windows), stable)
                if stable:
                    break
            after = await self._snapshot(stats)
        finally:
            for worker in workers:
                worker.cancel()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await asyncio.gather(*workers, return_exceptions=True)
        server = breakdown(before, after) if before and after else None
        return stream_step_result(level, samples, windows, settings.percentile, server=server)

    async def _worker(
        self, transport: StreamTransport, sampler: PromptSampler, recorder: _Recorder
    ) -> None:
        """One stream in flight at a time, the next sent as soon as the last one ended."""
        settings = self.settings
        while True:
            prompt, max_tokens = sampler.sample()
            clock = StreamClock(time.monotonic())
            end: float | None = None
            failure: Outcome | None = None
            text = ""
            try:
                async with asyncio.timeout(settings.timeout):
                    end = await transport.send(prompt, max_tokens, clock)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # every failure is counted, never a crash
                failure = classify_error(error, settings.protocol)
                text = error_text(error, timeout=settings.timeout)
            recorder.add(
                clock.result(
                    target=settings.url,
                    model=settings.model,
                    protocol=settings.protocol,
                    at=time.monotonic(),
                    end=end,
                    failure=failure,
                    error=text,
                )
            )
            if failure is not None:
                await asyncio.sleep(0)  # a refusing server must not starve the loop

    async def _wait(self, seconds: float) -> None:
        """Sleeps ``seconds`` or until ``stop`` is set, whichever comes first."""
        deadline = time.monotonic() + seconds
        while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(POLL_SECONDS, left))

    async def _window(self, recorder: _Recorder) -> StreamWindow:
        """One window: a time span, or (count mode) until it holds enough streams or the
        stream timeout passed."""
        settings = self.settings
        if settings.window_requests is None:
            await self._wait(settings.window_seconds)
            return recorder.cut()
        deadline = time.monotonic() + settings.timeout
        while (
            recorder.count < settings.window_requests
            and time.monotonic() < deadline
            and not self.stop.is_set()
        ):
            await asyncio.sleep(POLL_SECONDS)
        return recorder.cut()


def _window_result(window: StreamWindow, settings: SweepSettings) -> WindowResult:
    """What the stability rule compares: output tokens/s and the measure's percentile."""
    values = window.values(settings.measure)
    tokens_per_second = window.output_tokens / window.wall_seconds if window.wall_seconds else 0.0
    chosen = nearest_rank(values, settings.percentile / 100) if values else 0.0
    return WindowResult(tokens_per_second, chosen)


def stream_step_result(
    level: float,
    samples: Sequence[StreamWindow],
    windows: Sequence[WindowResult],
    percentile: float,
    *,
    server: ServerBreakdown | None = None,
) -> StepResult:
    """The step's numbers from its last three windows (as the plain sweep's)."""
    used = list(samples[-STABILITY_WINDOWS:]) or [StreamWindow()]
    merged = used[0]
    for window in used[1:]:
        merged = merged.merge(window)
    wall = merged.wall_seconds
    successes = merged.successes
    requests = len(successes)
    failed = len(merged.results) - requests
    latencies = merged.values("latency")
    latency = quantile_summary(latencies, percentile)
    per_request = sorted(
        r.itl_per_request_seconds for r in successes if r.itl_per_request_seconds is not None
    )
    rate = requests / wall if wall > 0 else 0.0
    per_request_cpu = merged.cpu_seconds / requests if requests else 0.0
    utilisation = merged.cpu_seconds / wall if wall > 0 else 0.0
    return StepResult(
        level=level,
        requests_per_second=rate,
        inferences_per_second=rate,
        latency=latency,
        requests=requests,
        errors=failed,
        error_rate=failed / len(merged.results) if merged.results else 0.0,
        stable=is_stable(windows),
        windows=len(windows),
        processes=1,
        client_cpu_per_request=per_request_cpu,
        client_latency_share=per_request_cpu / latency["avg"] if latency["avg"] > 0 else 0.0,
        generator_utilisation=utilisation,
        generator_bound=utilisation >= GENERATOR_BOUND_UTILISATION,
        server=server,
        window_throughputs=tuple(
            w.output_tokens / w.wall_seconds for w in used if w.wall_seconds > 0
        ),
        latency_samples=tuple(latencies),
        ttft=quantile_summary(merged.values("ttft"), percentile),
        itl=quantile_summary(merged.values("itl"), percentile),
        itl_per_request=quantile_summary(per_request, percentile),
        output_tokens_per_second=merged.output_tokens / wall if wall > 0 else 0.0,
    )
