"""Continuous batching for a simulated LLM: waiting and running sequences, a KV-cache pool.

The scheduler loop runs one *step* at a time, as TensorRT-LLM's inflight batcher and
vLLM's scheduler do:

1. **Admit** waiting sequences, oldest first, while ``running < max_num_seqs`` and the
   free KV blocks hold the sequence's tokens so far (its prompt, plus what it had
   generated before a preemption: vLLM V1 recomputes a preempted sequence).
2. **Reserve** a block for every running sequence whose next token starts a new block
   (one per ``tokens_per_block``). When the pool is empty the **newest** running
   sequence is preempted back to the front of the waiting queue, its blocks freed, and
   counted; this repeats until the older sequences fit.
3. **Run** the step: ``prefill_per_token`` per token admitted in it, then one decode
   pass costing ``decode_step_base + decode_step_per_seq × running``. Every running
   sequence gains one token (its first one if it was admitted in this step), which goes
   to the sequence's ``asyncio.Queue`` at once.

A step's duration is slept on the loop (the simulator's loop is ``precise_loop``'s), so
time to first token grows with the waiting queue and with the prompts prefilled ahead
of it, and the gap between tokens grows with the number of running sequences. ``sleep``
and ``clock`` are injectable so tests can run the maths on a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.llm_counters import LlmCounters
from tritonwatch.sim.models import LlmSpec

Sleep = Callable[[float], Awaitable[object]]
Clock = Callable[[], float]
OnDone = Callable[["Sequence", float, str | None], None]
"""Called once per sequence when it ends: with None on success, else the failure reason
(``BACKEND`` or ``CANCELED``) as Triton's ``nv_inference_request_failure`` names it."""


@dataclass(frozen=True, slots=True)
class Token:
    """One generated token as the sequence's queue receives it."""

    index: int
    text: str
    last: bool


@dataclass(frozen=True, slots=True)
class StreamError:
    """The sequence failed after it started; no token follows."""

    error: SimError


StreamItem = Token | StreamError


def token_text(index: int) -> str:
    """The text of token ``index``: distinct, so a client can count and order them (the
    words tests/triton_models/streaming sends, so the two servers' bytes compare)."""
    return f"token{index}"


def prompt_tokens(prompt: str, tokens_per_word: float) -> int:
    """The simulated token count of a prompt: words × tokens per word, at least one."""
    return max(1, math.ceil(len(prompt.split()) * tokens_per_word))


@dataclass(eq=False)
class Sequence:
    """One request in the engine."""

    prompt_tokens: int
    max_tokens: int
    arrival: float
    doomed: bool = False
    """A backend failure is drawn for it: it fails after its first token."""
    queue: asyncio.Queue[StreamItem] = field(default_factory=asyncio.Queue)
    generated: int = 0
    blocks: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    done: bool = False

    @property
    def context_tokens(self) -> int:
        """Tokens the KV cache must hold for it now (prompt plus generated)."""
        return self.prompt_tokens + self.generated


def blocks_for(tokens: int, tokens_per_block: int) -> int:
    """KV blocks that hold ``tokens`` tokens."""
    return -(-tokens // tokens_per_block)


class LlmEngine:
    """The scheduler of one LLM model (see the module docstring)."""

    def __init__(
        self,
        spec: LlmSpec,
        counters: LlmCounters,
        *,
        name: str,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        on_done: OnDone | None = None,
    ) -> None:
        self.spec = spec
        self.counters = counters
        self.name = name
        self.clock = clock
        self._sleep = sleep
        self._on_done = on_done
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_blocks_used = 0
        self.last_step_context_requests = 0
        self.last_step_context_tokens = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- readings -----------------------------------------------------------------------

    @property
    def kv_blocks_free(self) -> int:
        """Blocks no sequence holds."""
        return self.spec.kv_blocks - self.kv_blocks_used

    @property
    def kv_usage(self) -> float:
        """Share of the KV-cache pool in use (0–1)."""
        return self.kv_blocks_used / self.spec.kv_blocks

    # -- requests -----------------------------------------------------------------------

    def submit(self, prompt_tokens: int, max_tokens: int, *, doomed: bool = False) -> Sequence:
        """Queues a request; its tokens arrive on the returned sequence's queue."""
        sequence = Sequence(prompt_tokens, max_tokens, self.clock(), doomed)
        self.waiting.append(sequence)
        self._wake.set()
        return sequence

    def cancel(self, sequence: Sequence) -> None:
        """Drops a sequence whose client went away; its blocks return to the pool."""
        if sequence.done:
            return
        sequence.done = True
        if sequence in self.running:
            self.running.remove(sequence)
        with contextlib.suppress(ValueError):
            self.waiting.remove(sequence)
        self._release(sequence)
        self._report(sequence, "CANCELED")

    # -- the loop -----------------------------------------------------------------------

    def start(self) -> None:
        """Runs the scheduler as a task on the current loop."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"llm-{self.name}")

    async def run(self) -> None:
        """Steps while there is work; sleeps until a request arrives otherwise."""
        while True:
            if not await self.step():
                self._wake.clear()
                await self._wake.wait()

    async def step(self) -> bool:
        """One scheduler step; False when there was nothing to run."""
        admitted = self._admit()
        self._reserve_next_blocks()
        if not self.running:
            self.last_step_context_requests = self.last_step_context_tokens = 0
            return False
        spec = self.spec
        context_tokens = sum(sequence.context_tokens for sequence in admitted)
        self.last_step_context_requests = len(admitted)
        self.last_step_context_tokens = context_tokens
        duration_us = (
            context_tokens * spec.prefill_per_token
            + spec.decode_step_base
            + spec.decode_step_per_seq * len(self.running)
        )
        await self._sleep(duration_us / 1e6)
        self.counters.steps += 1
        self._emit_tokens(self.clock())
        return True

    def _admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) < self.spec.max_num_seqs:
            sequence = self.waiting[0]
            needed = blocks_for(sequence.context_tokens, self.spec.tokens_per_block)
            if needed > self.spec.kv_blocks:
                self.waiting.popleft()
                self._fail(sequence, "the prompt does not fit in the KV cache")
                continue
            if needed > self.kv_blocks_free:
                break
            self.waiting.popleft()
            sequence.blocks = needed
            self.kv_blocks_used += needed
            if sequence.admitted_at is None:
                sequence.admitted_at = self.clock()
                self.counters.prompt_tokens += sequence.prompt_tokens
            self.running.append(sequence)
            admitted.append(sequence)
        return admitted

    def _reserve_next_blocks(self) -> None:
        """Gives each running sequence room for its next token, preempting when dry."""
        index = 0
        while index < len(self.running):
            sequence = self.running[index]
            needed = blocks_for(sequence.context_tokens + 1, self.spec.tokens_per_block)
            if needed <= sequence.blocks:
                index += 1
                continue
            if self.kv_blocks_free > 0:
                sequence.blocks += 1
                self.kv_blocks_used += 1
                index += 1
                continue
            self._preempt(self.running[-1])  # the newest; may be this sequence itself

    def _preempt(self, sequence: Sequence) -> None:
        self.running.remove(sequence)
        self._release(sequence)
        self.waiting.appendleft(sequence)
        self.counters.preemptions += 1

    def _release(self, sequence: Sequence) -> None:
        self.kv_blocks_used -= sequence.blocks
        sequence.blocks = 0

    def _emit_tokens(self, now: float) -> None:
        counters = self.counters
        for sequence in list(self.running):
            index = sequence.generated
            sequence.generated += 1
            counters.generation_tokens += 1
            if sequence.first_token_at is None:
                sequence.first_token_at = now
                counters.ttft_s.observe(now - sequence.arrival)
                counters.first_response_ms.observe((now - sequence.arrival) * 1e3)
            elif sequence.last_token_at is not None:
                counters.itl_s.observe(now - sequence.last_token_at)
            sequence.last_token_at = now
            last = sequence.generated >= sequence.max_tokens
            sequence.queue.put_nowait(Token(index, token_text(index), last))
            if sequence.doomed:
                self.running.remove(sequence)
                self._fail(sequence, "")
            elif last:
                self.running.remove(sequence)
                self._finish(sequence, now)

    def _finish(self, sequence: Sequence, now: float) -> None:
        sequence.done = True
        self._release(sequence)
        self.counters.finished += 1
        self.counters.e2e_s.observe(now - sequence.arrival)
        self._report(sequence, None)

    def _fail(self, sequence: Sequence, reason: str) -> None:
        sequence.done = True
        self._release(sequence)
        message = reason or f"simulated backend failure in '{self.name}'"
        sequence.queue.put_nowait(StreamError(SimError(ErrorCode.INTERNAL, message)))
        self._report(sequence, "BACKEND")

    def _report(self, sequence: Sequence, reason: str | None) -> None:
        if self._on_done is not None:
            self._on_done(sequence, self.clock(), reason)

    async def close(self) -> None:
        """Stops the loop; every sequence still in it fails."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sequence in [*self.running, *self.waiting]:
            self._fail(sequence, "the model is unloading")
        self.running.clear()
        self.waiting.clear()
