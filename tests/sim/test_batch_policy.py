"""Triton's dynamic-batching rule as a pure function of the queue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritonwatch.sim.batcher import BatchDecision, decide_batch
from tritonwatch.sim.models import DynamicBatchingSpec

pytestmark = pytest.mark.sim


def batching(delay_us: int = 0, preferred: tuple[int, ...] = ()) -> DynamicBatchingSpec:
    return DynamicBatchingSpec(
        preferred_batch_size=preferred, max_queue_delay_microseconds=delay_us
    )


def test_empty_queue_waits_for_arrivals() -> None:
    """Nothing queued: nothing to send and no deadline."""
    assert decide_batch([], 0.0, max_batch_size=8, batching=batching()) == BatchDecision(0, None)


def test_without_dynamic_batching_each_request_runs_alone() -> None:
    """No dynamic_batching block: one request per execution, however many wait."""
    assert decide_batch([1, 1, 1], 0.0, max_batch_size=8, batching=None).take == 1


def test_zero_delay_sends_whatever_is_queued() -> None:
    """Delay 0 and no preferred sizes: send everything that fits, at once."""
    assert decide_batch([1] * 5, 0.0, max_batch_size=8, batching=batching()).take == 5
    assert decide_batch([1] * 12, 0.0, max_batch_size=8, batching=batching()).take == 8


def test_delay_holds_a_partial_batch_until_the_oldest_has_waited() -> None:
    """Below max_batch_size, the batcher waits out the rest of the delay, then sends."""
    waiting = decide_batch([1, 1], 0.003, max_batch_size=8, batching=batching(delay_us=10_000))
    assert waiting.take == 0
    assert waiting.wait_s == pytest.approx(0.007)
    due = decide_batch([1, 1], 0.010, max_batch_size=8, batching=batching(delay_us=10_000))
    assert due.take == 2


def test_full_batch_goes_before_the_delay() -> None:
    """A full batch never waits for the delay."""
    decision = decide_batch([1] * 9, 0.0, max_batch_size=8, batching=batching(delay_us=50_000))
    assert decision.take == 8


def test_reachable_preferred_size_goes_at_once() -> None:
    """With preferred [4, 8] and 6 queued, a batch of 4 goes immediately."""
    decision = decide_batch(
        [1] * 6, 0.0, max_batch_size=16, batching=batching(delay_us=50_000, preferred=(4, 8))
    )
    assert decision.take == 4


def test_requests_with_their_own_batch_dimension_are_not_split() -> None:
    """Requests of 3 rows each: two fit in 8, the third would overflow, so two go."""
    decision = decide_batch([3, 3, 3], 0.0, max_batch_size=8, batching=batching(delay_us=50_000))
    assert decision.take == 2


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=30),
    age_s=st.floats(min_value=0, max_value=0.1),
    delay_us=st.integers(min_value=0, max_value=50_000),
    preferred=st.sets(st.integers(min_value=1, max_value=16), max_size=3),
)
def test_batches_never_overflow_and_expired_queues_always_send(
    sizes: list[int], age_s: float, delay_us: int, preferred: set[int]
) -> None:
    """Whatever the queue: at most max_batch_size rows, and a due batch always goes."""
    spec = batching(delay_us=delay_us, preferred=tuple(sorted(preferred)))
    decision = decide_batch(sizes, age_s, max_batch_size=16, batching=spec)
    assert 0 <= decision.take <= len(sizes)
    assert sum(sizes[: decision.take]) <= 16
    if delay_us == 0 or age_s >= delay_us / 1e6:
        assert decision.take >= 1
    if decision.take == 0:
        assert decision.wait_s is not None
        assert 0 < decision.wait_s <= delay_us / 1e6
