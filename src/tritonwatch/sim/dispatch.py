"""Where a checked request goes: an ensemble's steps, a sequence, the cache, the batcher.

``run_request`` is the one path every inference takes after the repository has checked
it (``ModelRepository.infer``), and the path each ensemble step takes too, so a step is
an ordinary request on its model: its sequence (the ensemble's correlation id and
flags pass to it, as Triton passes them), its response cache and its batcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tritonwatch.sim.cache import ResponseCache, cache_key, request_bytes
from tritonwatch.sim.ensemble import run_ensemble
from tritonwatch.sim.model_kinds import ResolvedStep
from tritonwatch.sim.models import ModelSpec
from tritonwatch.sim.sequences import SequenceFlags
from tritonwatch.sim.stats import RequestTimes
from tritonwatch.sim.tensors import Array

if TYPE_CHECKING:
    from tritonwatch.sim.batcher import ModelRuntime

_NO_COMPUTE = RequestTimes(0, 0, 0, 0, 0)


class Models(Protocol):
    """What a request needs of the repository (``ModelRepository`` is one)."""

    @property
    def cache(self) -> ResponseCache | None:
        """The server's response cache, or None."""

    def runtime(self, name: str, version: str = "") -> ModelRuntime:
        """The loaded runtime of a model (raises SimError as Triton answers)."""

    def draw_failure(self, runtime: ModelRuntime, arrival: float) -> bool:
        """Draws the error-burst fault of a request (raises SimError for most reasons)."""

    def steps(self, spec: ModelSpec) -> tuple[ResolvedStep, ...]:
        """An ensemble's steps, resolved against the loaded models."""


async def run_request(
    repository: Models,
    runtime: ModelRuntime,
    arrays: Mapping[str, Array],
    batch_size: int,
    arrival: float,
    *,
    doomed: bool,
    sequence: SequenceFlags,
) -> tuple[dict[str, Array], RequestTimes]:
    """Runs one checked request on ``runtime``; returns its outputs and durations (an
    ensemble's or a cache hit's count no compute of their own here).

    Raises:
        SimError: the request (or one of its steps) failed; it is counted already.
    """
    spec = runtime.spec
    if spec.is_ensemble:

        async def run_step(
            step: ResolvedStep, inputs: Mapping[str, Array], step_doomed: bool
        ) -> tuple[dict[str, Array], RequestTimes]:
            version = "" if step.version == -1 else str(step.version)
            step_runtime = repository.runtime(step.model, version)
            if step_runtime.sequences is not None:
                step_runtime.sequences.check(sequence, batch_size)
            now = runtime.clock()
            failing = repository.draw_failure(step_runtime, now) or step_doomed
            return await run_request(
                repository,
                step_runtime,
                inputs,
                batch_size,
                now,
                doomed=failing,
                sequence=sequence,
            )

        result = await run_ensemble(
            runtime,
            repository.steps(spec),
            arrays,
            batch_size=batch_size,
            arrival=arrival,
            doomed=doomed,
            run_step=run_step,
        )
        return result, _NO_COMPUTE
    if runtime.sequences is not None:
        async with runtime.sequences.hold(sequence):
            return await _execute(repository, runtime, arrays, batch_size, arrival, doomed=doomed)
    return await _execute(repository, runtime, arrays, batch_size, arrival, doomed=doomed)


async def _execute(
    repository: Models,
    runtime: ModelRuntime,
    arrays: Mapping[str, Array],
    batch_size: int,
    arrival: float,
    *,
    doomed: bool,
) -> tuple[dict[str, Array], RequestTimes]:
    """Through the response cache (when both the server and the model have it on) and
    the model's batcher; a hit executes nothing and has no compute."""
    spec = runtime.spec
    cache = repository.cache if spec.response_cache else None
    key, lookup_ns = b"", 0
    if cache is not None:
        key = cache_key(spec.name, spec.version_label, arrays)
        cached, lookup_ns = cache.lookup(key, request_bytes(arrays))
        if cached is not None:
            runtime.record_cache_hit(runtime.clock(), arrival, lookup_ns)
            return cached, _NO_COMPUTE
    request = runtime.submit(arrays, batch_size, arrival, doomed=doomed)
    result = await request.future
    if cache is not None:
        insert_ns = cache.insert(key, result)
        runtime.record_cache_miss(runtime.clock(), lookup_ns + insert_ns)
    assert request.times is not None  # set before the future resolved
    return result, request.times
