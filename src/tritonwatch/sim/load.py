"""In-process load against a running simulator, without any client or socket.

Tests, benchmarks and demos use it to exercise the batcher and the GPU model precisely
and cheaply: a request costs tens of microseconds here instead of hundreds through a
client. It drives the same ``ModelRepository.infer`` the frontends call, so counters,
statistics and ground truth move exactly as for network traffic (minus the network).
Run it on the simulator's loop, e.g. ``sim.run_async(lambda core: closed_loop(core, ...))``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from tritonwatch.sim.core import SimCore
from tritonwatch.sim.errors import SimError
from tritonwatch.sim.llm_stream import start_stream
from tritonwatch.sim.models import ModelSpec
from tritonwatch.sim.tensors import BY_CONFIG, Array, RequestInput, wire_type

T = TypeVar("T")


def example_inputs(spec: ModelSpec, batch_size: int = 1) -> dict[str, tuple[str, Array]]:
    """Valid inputs for ``spec`` (ones, or ``b"sim"`` for BYTES) of ``batch_size`` rows."""
    inputs = {}
    for tensor in spec.input:
        shape = ((batch_size,) if spec.max_batch_size > 0 else ()) + tensor.dims
        info = BY_CONFIG[tensor.data_type]
        if info.wire == "BYTES":
            array = np.full(shape, b"sim", dtype=np.object_)
        else:
            array = np.ones(shape, dtype=info.numpy)
        inputs[tensor.name] = (wire_type(tensor.data_type), array)
    return inputs


@dataclass
class LoadResult:
    """What a load run achieved."""

    completed: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    """In-process latency of each success (submit → result), in completion order."""

    @property
    def throughput(self) -> float:
        """Successful requests per second."""
        return self.completed / self.elapsed_s if self.elapsed_s > 0 else 0.0


async def over_one_interval(core: SimCore, load: Awaitable[T]) -> T:
    """Closes a metrics interval right before and right after ``load``, so the GPU
    gauges (utilisation, power) describe exactly that load."""
    core.poll()
    result = await load
    core.poll()
    return result


def as_request(inputs: dict[str, tuple[str, Array]]) -> list[RequestInput]:
    """``example_inputs`` as the request tensors ``ModelRepository.infer`` takes."""
    return [
        RequestInput(name, datatype, tuple(array.shape), array=array)
        for name, (datatype, array) in inputs.items()
    ]


async def _one(core: SimCore, model: str, inputs: list[RequestInput], result: LoadResult) -> None:
    started = core.loop.time()
    try:
        await core.repository.infer(model, "", inputs)
    except SimError:
        result.failed += 1
        return
    result.completed += 1
    result.latencies_s.append(core.loop.time() - started)


def _prepare(
    core: SimCore, model: str, batch_size: int
) -> tuple[list[RequestInput], LoadResult, asyncio.AbstractEventLoop, float]:
    """Inputs for ``model``, an empty result, the loop, and the start time."""
    inputs = as_request(example_inputs(core.repository.slot(model).spec, batch_size))
    return inputs, LoadResult(), core.loop, core.loop.time()


async def closed_loop(
    core: SimCore, model: str, *, concurrency: int, duration_s: float, batch_size: int = 1
) -> LoadResult:
    """``concurrency`` workers, each sending its next request when the last returns."""
    inputs, result, loop, started = _prepare(core, model, batch_size)
    deadline = started + duration_s

    async def worker() -> None:
        while loop.time() < deadline:
            await _one(core, model, inputs, result)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed_s = loop.time() - started
    return result


async def open_loop(
    core: SimCore, model: str, *, rate_per_s: float, duration_s: float, batch_size: int = 1
) -> LoadResult:
    """Requests sent on a fixed schedule whether or not earlier ones returned."""
    inputs, result, loop, started = _prepare(core, model, batch_size)
    count = max(1, round(rate_per_s * duration_s))
    tasks = []
    for index in range(count):
        delay = started + index / rate_per_s - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(_one(core, model, inputs, result)))
    await asyncio.gather(*tasks)
    result.elapsed_s = loop.time() - started
    return result


@dataclass
class StreamLoadResult:
    """What a streaming load run measured, in process (loop clock)."""

    completed: int = 0
    failed: int = 0
    tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)
    """Submit → first token, per completed stream."""
    gaps_s: list[float] = field(default_factory=list)
    """Every gap between consecutive tokens of every stream."""


def words(count: int) -> str:
    """A prompt of ``count`` words."""
    return " ".join(f"w{index}" for index in range(count))


async def stream_closed_loop(
    core: SimCore,
    model: str,
    *,
    concurrency: int,
    streams_per_worker: int,
    prompt_words: int,
    max_tokens: int,
) -> StreamLoadResult:
    """``concurrency`` workers streaming from an LLM model, each starting its next stream
    when the last ends; the same path the generate, OpenAI and gRPC frontends take."""
    result, loop, prompt = StreamLoadResult(), core.loop, words(prompt_words)

    async def one() -> None:
        started = loop.time()
        try:
            stream = start_stream(core.repository, model, "", prompt=prompt, max_tokens=max_tokens)
        except SimError:
            result.failed += 1
            return
        stamps = []
        async with contextlib.aclosing(stream.responses()) as responses:
            async for response in responses:
                if response.error is not None:
                    result.failed += 1
                    return
                if response.token is not None:
                    stamps.append(loop.time())
        result.completed += 1
        result.tokens += len(stamps)
        result.ttft_s.append(stamps[0] - started)
        result.gaps_s.extend(later - earlier for earlier, later in itertools.pairwise(stamps))

    async def worker() -> None:
        for _ in range(streams_per_worker):
            await one()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return result
