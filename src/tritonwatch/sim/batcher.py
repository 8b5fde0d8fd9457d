"""One loaded model: its dynamic batcher, its instances, and how an execution costs.

Requests enter a FIFO queue with their arrival time. Whenever an instance is free, the
batcher applies Triton's rule (``DynamicBatchScheduler::GetDynamicBatch``): send at once
when a preferred batch size is reachable, when the batch cannot grow (it is full, or
the next request would overflow ``max_batch_size``), or when the oldest request has
waited ``max_queue_delay_microseconds``; otherwise wait for that deadline or the next
arrival. Without ``dynamic_batching`` (or without a batch dimension) each request
executes alone. Because batches form only when an instance is free, requests pile up
while all instances are busy — so the batch size grows with load, as it does in Triton.

An execution of ``n`` inferences sleeps through compute_input, runs compute_infer on the
instance's shared GPU (``GpuScheduler``), and sleeps through compute_output; every
duration reported is measured on the loop clock, not assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.faults import FaultBook
from tritonwatch.sim.gpu import GpuScheduler
from tritonwatch.sim.llm_engine import LlmEngine
from tritonwatch.sim.llm_engine import Sequence as LlmSequence
from tritonwatch.sim.models import DynamicBatchingSpec, ModelSpec
from tritonwatch.sim.sequences import SequenceBook
from tritonwatch.sim.stats import Ledger, ModelSeries, RequestTimes
from tritonwatch.sim.tensors import Array, compute_outputs

_NS = 1e9


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """How many queued requests to execute now; else how long to wait at most."""

    take: int
    wait_s: float | None = None


_AGE_TOLERANCE_S = 1e-9


def decide_batch(
    sizes: Iterable[int],
    oldest_age_s: float,
    *,
    max_batch_size: int,
    batching: DynamicBatchingSpec | None,
) -> BatchDecision:
    """Triton's dynamic-batching rule over the queue's request sizes, oldest first.

    Args:
        sizes: batch size of each queued request (only the first ``max_batch_size``
            can matter).
        oldest_age_s: how long the oldest queued request has waited.
        max_batch_size: the model's ``max_batch_size``.
        batching: the ``dynamic_batching`` block, or None when it is disabled.
    """
    iterator = iter(sizes)
    first = next(iterator, None)
    if first is None:
        return BatchDecision(0)
    if batching is None:
        return BatchDecision(1)
    preferred = frozenset(batching.preferred_batch_size)
    max_preferred = max(preferred) if preferred else max_batch_size
    delay_s = batching.max_queue_delay_microseconds / 1e6
    # The timer set for the delay can wake an ulp early (``now + (delay - age)`` rounds):
    # without the nanosecond of slack a clock that only moves to timers never gets there.
    delay_exceeded = delay_s > 0 and oldest_age_s >= delay_s - _AGE_TOLERANCE_S
    pending, taken, best, send_now = first, 1, 0, False
    if pending in preferred:
        best = taken
    for size in itertools.islice(iterator, max_batch_size):
        if pending + size > max_preferred and best == 0:
            best = taken
        if pending + size > max_batch_size:
            send_now = True
            break
        pending += size
        taken += 1
        if pending in preferred:
            best = taken
    if best and not delay_exceeded:
        return BatchDecision(best)
    if send_now or pending >= max_preferred or delay_exceeded or delay_s == 0:
        return BatchDecision(taken)
    return BatchDecision(0, delay_s - oldest_age_s)


@dataclass(slots=True, eq=False)
class QueuedRequest:
    """A request waiting for (or in) an execution."""

    inputs: Mapping[str, Array]
    batch_size: int
    arrival: float
    future: asyncio.Future[dict[str, Array]]
    doomed: bool = False
    """A backend error is drawn for it: it executes, then fails with reason BACKEND."""
    times: RequestTimes | None = None
    """Its durations, set when it succeeds (an ensemble sums its steps' compute)."""


@dataclass(slots=True, eq=False)
class Instance:
    """One model instance, on a GPU (``gpu``) or on the CPU (``gpu`` is None)."""

    gpu: GpuScheduler | None
    retired: bool = False


@dataclass
class _Placement:
    gpus: Sequence[GpuScheduler | None]
    instances: list[Instance] = field(default_factory=list)


class ModelRuntime:
    """A loaded model: queue, batcher task, instances, and its statistics ledger."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        loop: asyncio.AbstractEventLoop,
        gpus: Sequence[GpuScheduler | None],
        series: ModelSeries,
        faults: FaultBook,
        rng: np.random.Generator,
        summaries: bool,
    ) -> None:
        self.spec = spec
        self.stats = Ledger()
        self.clock = loop.time
        """The loop's clock (what every duration here is measured on)."""
        self._loop = loop
        self._series = series
        self._faults = faults
        self._rng = rng
        self._summaries = summaries
        self._placement = _Placement(gpus)
        self._free: list[Instance] = []
        self._queue: deque[QueuedRequest] = deque()
        self._executing: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.sequences: SequenceBook | None = None
        """The open sequences of a stateful model (``sequence_batching``)."""
        self.set_instance_count(spec.instance_group.count)
        if spec.sequence_batching is not None:
            self.sequences = SequenceBook(spec, loop.time, spec.instance_group.count)
        self._batcher = loop.create_task(self._run_batcher(), name=f"batcher-{spec.name}")
        self.llm: LlmEngine | None = None
        """The continuous-batching engine of an LLM model (its requests bypass the
        dynamic batcher)."""
        if spec.llm is not None:
            self.llm = LlmEngine(
                spec.llm,
                series.llm,
                name=spec.name,
                clock=loop.time,
                sleep=self._llm_step,
                on_done=self._llm_done,
            )
            self.llm.start()

    # -- instances --------------------------------------------------------------------

    @property
    def instance_count(self) -> int:
        """Instances per device, as ``instance_group.count`` states it."""
        live = [i for i in self._placement.instances if not i.retired]
        return len(live) // max(1, len(self._placement.gpus))

    def _owner(self, index: int) -> str:
        return f"{self.spec.name}/{self.spec.version}/instance-{index}"

    def set_instance_count(self, count: int) -> None:
        """Grows or shrinks the instances in place; busy ones retire when they finish.

        Raises:
            OutOfGpuMemoryError: a new instance does not fit on its GPU.
        """
        footprint = self.spec.memory_per_instance
        live = [i for i in self._placement.instances if not i.retired]
        wanted = count * len(self._placement.gpus)
        for index, instance in enumerate(live[:wanted]):
            # Kept instances take the spec's current footprint too (a scenario may
            # have resized them, e.g. memory-scarce applied at run time).
            if instance.gpu is not None:
                instance.gpu.gpu.allocate(self._owner(index), footprint)
        for index in range(len(live), wanted):
            gpu = self._placement.gpus[index % len(self._placement.gpus)]
            if gpu is not None:
                gpu.gpu.allocate(self._owner(index), footprint)
            instance = Instance(gpu)
            self._placement.instances.append(instance)
            self._free.append(instance)
        for index in range(len(live) - 1, wanted - 1, -1):
            instance = live[index]
            instance.retired = True
            if instance.gpu is not None:
                instance.gpu.gpu.allocate(self._owner(index), 0)
            if instance in self._free:
                self._free.remove(instance)
        self._placement.instances = [i for i in self._placement.instances if not i.retired]
        if self.sequences is not None:
            self.sequences.resize(count)
        self._wake.set()

    # -- requests ---------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Requests queued and not yet executing (``nv_inference_pending_request_count``);
        for an LLM model, the sequences waiting for admission."""
        if self.llm is not None:
            return len(self.llm.waiting)
        waiting = 0 if self.sequences is None else self.sequences.waiting
        return len(self._queue) + waiting

    async def _llm_step(self, seconds: float) -> None:
        """One engine step on the model's GPU, under the hang and latency faults."""
        loop, name = self._loop, self.spec.name
        await self._faults.wait_while_hung(loop, "inference", name)
        seconds *= self._faults.latency_factor(name, loop.time())
        instance = self._placement.instances[0] if self._placement.instances else None
        running = len(self.llm.running) if self.llm is not None else 1
        occupancy = self.spec.gpu_occupancy
        share = min(1.0, occupancy.base + occupancy.per_item * running)
        if instance is not None and instance.gpu is not None:
            await instance.gpu.run(seconds, share)
        elif seconds > 0:
            await asyncio.sleep(seconds)

    def _llm_done(self, sequence: LlmSequence, now: float, reason: str | None) -> None:
        """Counts an ended sequence as Triton counts a decoupled request."""
        if reason is not None:
            self.record_failure(reason, now - sequence.arrival)
            return
        admitted = sequence.admitted_at if sequence.admitted_at is not None else now
        times = RequestTimes(
            request_ns=int((now - sequence.arrival) * _NS),
            queue_ns=int((admitted - sequence.arrival) * _NS),
            compute_input_ns=0,
            compute_infer_ns=int((now - admitted) * _NS),
            compute_output_ns=0,
        )
        self.stats.record_success(times)
        self._series.record_success(now, times, with_summaries=self._summaries)
        self.stats.record_execution(1, 0, times.compute_infer_ns, 0)
        self._series.ledger.record_execution(1, 0, times.compute_infer_ns, 0)

    def submit(
        self, inputs: Mapping[str, Array], batch_size: int, arrival: float, *, doomed: bool
    ) -> QueuedRequest:
        """Queues a checked request; its ``future`` resolves with its outputs (and its
        ``times`` are set by then)."""
        future: asyncio.Future[dict[str, Array]] = self._loop.create_future()
        request = QueuedRequest(inputs, batch_size, arrival, future, doomed)
        self._queue.append(request)
        self._idle.clear()
        self._wake.set()
        return request

    def record_failure(self, reason: str, duration_s: float) -> None:
        """Counts a failed request in both the statistics and the metrics ledgers."""
        duration_ns = int(duration_s * _NS)
        self.stats.record_failure(reason, duration_ns)
        self._series.ledger.record_failure(reason, duration_ns)

    def record_cache_hit(self, now: float, arrival: float, lookup_ns: int) -> None:
        """Counts a request answered from the response cache at ``now`` (its lookup
        took ``lookup_ns``): a success without execution, in both ledgers."""
        queue_ns = int((now - arrival) * _NS)
        request_ns = queue_ns + lookup_ns
        self.stats.record_cache_hit(request_ns, queue_ns, lookup_ns)
        self._series.record_cache_hit(
            now, request_ns, queue_ns, lookup_ns, with_summaries=self._summaries
        )

    def record_cache_miss(self, now: float, miss_ns: int) -> None:
        """Counts a miss's lookup and insertion once its request has succeeded."""
        self.stats.record_cache_miss(miss_ns)
        self._series.record_cache_miss(now, miss_ns, with_summaries=self._summaries)

    def record_composed(self, now: float, times: RequestTimes, batch_size: int) -> None:
        """Counts a request this model did not execute itself (an ensemble's): one
        success and one execution of ``batch_size`` with the compute of ``times``."""
        self.stats.record_success(times)
        self._series.record_success(now, times, with_summaries=self._summaries)
        stages = (times.compute_input_ns, times.compute_infer_ns, times.compute_output_ns)
        self.stats.record_execution(batch_size, *stages)
        self._series.ledger.record_execution(batch_size, *stages)

    async def _run_batcher(self) -> None:
        queue, loop = self._queue, self._loop
        while True:
            if not queue or not self._free:
                self._wake.clear()
                await self._wake.wait()
                continue
            decision = decide_batch(
                (request.batch_size for request in queue),
                loop.time() - queue[0].arrival,
                max_batch_size=self.spec.max_batch_size,
                batching=self.spec.batch_rule,
            )
            if decision.take:
                batch = [queue.popleft() for _ in range(decision.take)]
                task = loop.create_task(self._execute(self._free.pop(), batch))
                self._executing.add(task)
                task.add_done_callback(self._executing.discard)
                continue
            self._wake.clear()
            timer = loop.call_later(decision.wait_s or 0.0, self._wake.set)
            await self._wake.wait()
            timer.cancel()

    def _stage_seconds(self, base_us: float, per_item_us: float, items: int) -> float:
        return (base_us + per_item_us * items) / 1e6

    async def _execute(self, instance: Instance, batch: list[QueuedRequest]) -> None:
        spec, loop, timing = self.spec, self._loop, self.spec.timing
        items = sum(request.batch_size for request in batch)
        started = loop.time()
        try:
            input_s = self._stage_seconds(
                timing.compute_input, timing.compute_input_per_item, items
            )
            if input_s > 0:
                await asyncio.sleep(input_s)
            input_done = loop.time()
            await self._faults.wait_while_hung(loop, "inference", spec.name)
            infer_s = self._stage_seconds(
                timing.compute_infer, timing.compute_infer_per_item, items
            )
            infer_s *= self._faults.latency_factor(spec.name, input_done)
            if timing.noise_sigma > 0:
                sigma = timing.noise_sigma
                infer_s *= float(self._rng.lognormal(-sigma * sigma / 2, sigma))
            occupancy = min(1.0, spec.gpu_occupancy.base + spec.gpu_occupancy.per_item * items)
            if instance.gpu is not None:
                await instance.gpu.run(infer_s, occupancy)
            elif infer_s > 0:
                await asyncio.sleep(infer_s)
            infer_done = loop.time()
            outputs = [compute_outputs(spec, r.inputs, r.batch_size) for r in batch]
            output_s = self._stage_seconds(
                timing.compute_output, timing.compute_output_per_item, items
            )
            if output_s > 0:
                await asyncio.sleep(output_s)
        except asyncio.CancelledError:
            self._fail_all(batch, "the model was unloaded while executing")
            raise
        finally:
            if not instance.retired:
                self._free.append(instance)
            self._wake.set()
        done = loop.time()
        self._complete(batch, outputs, (started, input_done, infer_done, done))

    def _complete(
        self,
        batch: list[QueuedRequest],
        outputs: list[dict[str, Array]],
        marks: tuple[float, float, float, float],
    ) -> None:
        started, input_done, infer_done, done = marks
        input_ns = int((input_done - started) * _NS)
        infer_ns = int((infer_done - input_done) * _NS)
        output_ns = int((done - infer_done) * _NS)
        succeeded = 0
        for request, result in zip(batch, outputs, strict=True):
            if request.future.done():  # the call was cancelled (a gRPC client gave up)
                self.record_failure("CANCELED", done - request.arrival)
                continue
            if request.doomed:
                self.record_failure("BACKEND", done - request.arrival)
                request.future.set_exception(
                    SimError(ErrorCode.INTERNAL, f"simulated backend failure in '{self.spec.name}'")
                )
                continue
            times = RequestTimes(
                request_ns=int((done - request.arrival) * _NS),
                queue_ns=int((started - request.arrival) * _NS),
                compute_input_ns=input_ns,
                compute_infer_ns=infer_ns,
                compute_output_ns=output_ns,
            )
            self.stats.record_success(times)
            self._series.record_success(
                done, times, with_summaries=self._summaries, cached=self.spec.response_cache
            )
            succeeded += request.batch_size
            request.times = times
            request.future.set_result(result)
        if succeeded:
            self.stats.record_execution(succeeded, input_ns, infer_ns, output_ns)
            self._series.ledger.record_execution(succeeded, input_ns, infer_ns, output_ns)
        if not self._queue and not self._executing - {asyncio.current_task()}:
            self._idle.set()

    def _fail_all(self, requests: Iterable[QueuedRequest], message: str) -> None:
        for request in requests:
            if not request.future.done():
                request.future.set_exception(SimError(ErrorCode.UNAVAILABLE, message))

    # -- lifecycle --------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> None:
        """Waits (at most ``timeout_s``) for queued and executing requests to finish."""
        engine = self.llm
        if engine is not None:
            deadline = self._loop.time() + timeout_s
            while (engine.running or engine.waiting) and self._loop.time() < deadline:
                await asyncio.sleep(0.05)
        if self._queue or self._executing:
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout_s)

    async def close(self) -> None:
        """Stops the batcher, fails what is left, and frees the instances' GPU memory."""
        if self.llm is not None:
            await self.llm.close()
        self._batcher.cancel()
        for task in list(self._executing):
            task.cancel()
        await asyncio.gather(self._batcher, *self._executing, return_exceptions=True)
        self._fail_all(self._queue, f"model '{self.spec.name}' is unloading")
        self._queue.clear()
        self.set_instance_count(0)
