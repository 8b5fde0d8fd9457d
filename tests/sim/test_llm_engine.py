"""Continuous-batching maths of the LLM engine, on a fake clock (no sleeps, no server)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from tritonwatch.sim.llm_counters import Histogram, LlmCounters
from tritonwatch.sim.llm_engine import (
    LlmEngine,
    StreamError,
    StreamItem,
    Token,
    blocks_for,
    prompt_tokens,
)
from tritonwatch.sim.models import LlmSpec

pytestmark = pytest.mark.sim


class FakeClock:
    """A clock that moves only when the engine sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Engine(LlmEngine):
    """The engine under test, remembering how each sequence ended."""

    def __init__(self, clock: FakeClock, **llm: object) -> None:
        spec = LlmSpec.model_validate(
            {"prefill_per_token": 100, "decode_step_base": 1000, "decode_step_per_seq": 10, **llm}
        )
        self.ended: list[str | None] = []
        super().__init__(
            spec,
            LlmCounters(),
            name="m",
            clock=clock,
            sleep=clock.sleep,
            on_done=lambda sequence, now, reason: self.ended.append(reason),
        )


def engine(clock: FakeClock, **llm: object) -> Engine:
    return Engine(clock, **llm)


def run(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coroutine)


def drain(queue: asyncio.Queue[StreamItem]) -> list[StreamItem]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def indices(queue: asyncio.Queue[StreamItem]) -> list[int]:
    return [item.index for item in drain(queue) if isinstance(item, Token)]


def test_prompt_tokens_and_blocks_round_up() -> None:
    """Prompt tokens are words × tokens per word rounded up; blocks round up too."""
    assert prompt_tokens("a b c", 1.3) == 4
    assert prompt_tokens("", 1.3) == 1
    assert blocks_for(16, 16) == 1
    assert blocks_for(17, 16) == 2


def test_one_step_prefills_the_admitted_and_gives_every_running_sequence_a_token() -> None:
    """Breaks if a step's cost (prefill + decode pass) or its one-token-per-sequence rule drifts."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock)
        first = llm.submit(prompt_tokens=10, max_tokens=3)
        second = llm.submit(prompt_tokens=20, max_tokens=3)
        assert await llm.step()
        # prefill 30 tokens × 100 µs + 1000 µs + 2 running × 10 µs
        assert clock.slept == [pytest.approx((30 * 100 + 1000 + 2 * 10) / 1e6)]
        assert indices(first.queue) == [0]
        assert indices(second.queue) == [0]
        assert await llm.step()
        assert clock.slept[1] == pytest.approx((1000 + 2 * 10) / 1e6)  # decode only
        assert await llm.step()
        assert drain(first.queue) == [Token(1, "token1", False), Token(2, "token2", True)]
        assert llm.running == [] and llm.kv_blocks_used == 0
        assert not await llm.step()
        assert llm.counters.generation_tokens == 6
        assert llm.counters.prompt_tokens == 30
        assert llm.counters.finished == 2
        assert llm.ended == [None, None]

    run(scenario())


def test_admission_stops_at_max_num_seqs() -> None:
    """No more than max_num_seqs run at once; the rest wait, oldest first."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock, max_num_seqs=2)
        sequences = [llm.submit(prompt_tokens=4, max_tokens=2) for _ in range(5)]
        await llm.step()
        assert llm.running == sequences[:2]
        assert list(llm.waiting) == sequences[2:]
        await llm.step()  # the first two finish
        await llm.step()
        assert llm.running == sequences[2:4]

    run(scenario())


def test_admission_stops_when_the_prompt_blocks_do_not_fit() -> None:
    """A waiting sequence is admitted only when the free blocks hold its prompt."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock, kv_blocks=4, tokens_per_block=4)
        big = llm.submit(prompt_tokens=12, max_tokens=1)  # 3 blocks (+1 for its token)
        small = llm.submit(prompt_tokens=8, max_tokens=1)  # 2 blocks: only 1 left
        await llm.step()
        assert big.done and drain(big.queue) == [Token(0, "token0", True)]
        assert list(llm.waiting) == [small] and small.admitted_at is None
        assert llm.counters.preemptions == 0
        await llm.step()
        assert small.done and drain(small.queue) == [Token(0, "token0", True)]

    run(scenario())


def test_a_full_pool_preempts_the_newest_sequence_and_counts_it() -> None:
    """Breaks if a dry KV pool preempts any but the newest sequence, or does not count it."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock, kv_blocks=4, tokens_per_block=4)
        old = llm.submit(prompt_tokens=4, max_tokens=8)  # 1 block, needs a 2nd for token 1
        new = llm.submit(prompt_tokens=8, max_tokens=8)  # 2 blocks, needs a 3rd for token 1
        await llm.step()
        # admitted: 3 blocks; reserving the next blocks needs 2 more, 1 free: new preempted
        assert llm.counters.preemptions == 1
        assert llm.running == [old]
        assert list(llm.waiting) == [new]
        assert llm.kv_blocks_used == 2
        assert drain(new.queue) == []  # it made no token in this step
        assert indices(old.queue) == [0]

    run(scenario())


def test_a_preempted_sequence_resumes_with_its_tokens_recomputed() -> None:
    """Breaks if a resumed sequence skips recompute or loses or repeats token indices."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock, kv_blocks=3, tokens_per_block=2)
        old = llm.submit(prompt_tokens=2, max_tokens=2)
        new = llm.submit(prompt_tokens=1, max_tokens=4)
        tokens: list[Token] = []
        for _ in range(20):
            if not await llm.step():
                break
            tokens.extend(t for t in drain(new.queue) if isinstance(t, Token))
        assert llm.counters.preemptions >= 1
        assert [t.index for t in tokens] == [0, 1, 2, 3]
        assert tokens[-1].last
        assert old.done and new.done and llm.kv_blocks_used == 0

    run(scenario())


def test_a_doomed_sequence_fails_after_its_first_token() -> None:
    """A BACKEND failure arrives as an error after one token, counted as BACKEND."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock)
        doomed = llm.submit(prompt_tokens=4, max_tokens=5, doomed=True)
        await llm.step()
        items = drain(doomed.queue)
        assert isinstance(items[0], Token) and isinstance(items[1], StreamError)
        assert "simulated backend failure in 'm'" in items[1].error.message
        assert llm.ended == ["BACKEND"]
        assert llm.kv_blocks_used == 0

    run(scenario())


def test_cancel_frees_the_blocks_and_counts_canceled() -> None:
    """A client that leaves frees its sequence's blocks; Triton counts it CANCELED."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock)
        sequence = llm.submit(prompt_tokens=40, max_tokens=5)
        await llm.step()
        assert llm.kv_blocks_used == 3
        llm.cancel(sequence)
        assert llm.kv_blocks_used == 0 and llm.running == []
        assert llm.ended == ["CANCELED"]

    run(scenario())


def test_ttft_and_gaps_are_observed_on_the_engine_clock() -> None:
    """TTFT = first token − arrival and one gap per later token, in the histograms."""
    clock = FakeClock()

    async def scenario() -> None:
        llm = engine(clock)
        llm.submit(prompt_tokens=10, max_tokens=3)
        for _ in range(3):
            await llm.step()
        counters = llm.counters
        assert counters.ttft_s.count == 1
        assert counters.ttft_s.total == pytest.approx((10 * 100 + 1000 + 10) / 1e6)
        assert counters.first_response_ms.total == pytest.approx(2.01)
        assert counters.itl_s.count == 2
        assert counters.itl_s.total == pytest.approx(2 * 1010 / 1e6)

    run(scenario())


def test_histogram_buckets_are_cumulative_with_inf_last() -> None:
    """Bucket hits cumulate in bound order; a value on a bound counts in that bucket."""
    histogram = Histogram((100.0, 500.0))
    for value in (50.0, 100.0, 300.0, 9000.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(100.0, 2), (500.0, 3), (float("inf"), 4)]
    assert histogram.count == 4 and histogram.total == 9450.0
