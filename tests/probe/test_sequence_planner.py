"""The sequence canary's plan (probe/canary/sequence.py), on a fake clock: the schedule is
replayed as both sending paths drive it (gap, plan, take, finished per send time)."""

from __future__ import annotations

import random
import statistics

import pytest

from tritonwatch.probe.canary.sequence import (
    STALE_FRACTION,
    SequenceFlags,
    SequencePlanner,
    control_inputs,
    string_correlation_id,
)

ID_START = 9_000


def _planner(
    rate: float = 1.0,
    length: int = 20,
    idle: float = 1.0,
    *,
    id_count: int = 1000,
    first: int = 0,
    string_ids: bool = False,
    poisson: random.Random | None = None,
) -> SequencePlanner:
    return SequencePlanner(
        rate=rate,
        length=length,
        max_idle_seconds=idle,
        id_start=ID_START,
        id_count=id_count,
        first=first,
        string_ids=string_ids,
        poisson=poisson,
    )


def _replay(
    planner: SequencePlanner, sends: int, fail: frozenset[int] = frozenset()
) -> list[tuple[float, SequenceFlags]]:
    """Drives ``planner`` as the engine does for ``sends`` send times from t=0; the
    sends numbered in ``fail`` fail. Returns each send's time and flags."""
    sent, now = [], 0.0
    for index in range(sends):
        gap = planner.gap()
        planner.plan(now)
        flags = planner.take()
        planner.finished(now, ok=index not in fail)
        sent.append((now, flags))
        now += gap
    return sent


def test_the_default_plan_keeps_sequences_within_half_the_idle_time_and_the_rate() -> None:
    """Breaks if a gap inside a sequence passes half of Triton's idle time (1 s by
    default: the sequence would be released mid-way) or the stretched gap after END
    stops keeping the average at canary.rate."""
    planner = _planner(rate=1.0, length=20, idle=1.0)
    assert (planner.within_gap, planner.end_gap) == (0.5, 10.5)
    sent = _replay(planner, 200)
    times = [at for at, _ in sent]
    for (at, flags), following in zip(sent, times[1:], strict=False):
        if not flags.end:
            assert following - at <= 0.5
    sequences = 200 // 20
    assert times[-1] + planner.end_gap == pytest.approx(sequences * 20 / 1.0)


def test_each_sequence_starts_and_ends_once_and_ids_move_on() -> None:
    """Breaks if START is not on the first request of each sequence, END not on the last,
    or a sequence's requests do not share one id (new for every sequence)."""
    sent = _replay(_planner(length=4), 12)
    assert [(f.sequence_id, f.start, f.end) for _, f in sent] == [
        (ID_START + n, i == 0, i == 3) for n in range(3) for i in range(4)
    ]


def test_a_fast_canary_sends_at_its_rate_inside_sequences() -> None:
    """Breaks if a rate whose interval is under half the idle time is not sent as is."""
    planner = _planner(rate=20.0, length=20, idle=1.0)
    assert (planner.within_gap, planner.end_gap) == (pytest.approx(0.05), pytest.approx(0.05))


def test_a_failure_starts_a_new_sequence_with_start() -> None:
    """Breaks if the request after a failed one goes on with the broken sequence
    (Triton may never have seen its START) instead of a new id with START."""
    sent = _replay(_planner(length=5), 8, fail=frozenset({2}))
    flags = [(f.sequence_id, f.start, f.end) for _, f in sent]
    assert flags[:3] == [
        (ID_START, True, False),
        (ID_START, False, False),
        (ID_START, False, False),
    ]
    assert flags[3] == (ID_START + 1, True, False)
    assert flags[7] == (ID_START + 1, False, True)


def test_a_failure_of_a_request_never_sent_ends_its_sequence_too() -> None:
    """Breaks if a request that timed out waiting for a connection (planned, never made)
    stays queued (the next request would take its flags) or leaves its sequence open."""
    planner = _planner(length=5)
    for at in (0.0, 0.5):
        planner.plan(at)
    assert planner.take() == SequenceFlags(ID_START, start=True, end=False)
    planner.finished(0.0, ok=True)
    planner.finished(0.5, ok=False)  # timed out in the waiting queue: never made
    planner.plan(1.0)
    assert planner.take() == SequenceFlags(ID_START + 1, start=True, end=False)


def test_a_sequence_idle_for_too_long_is_given_up() -> None:
    """Breaks if the canary continues a sequence after a pause longer than
    STALE_FRACTION of the idle time (Triton may have released it)."""
    planner = _planner(length=5, idle=1.0)
    planner.plan(0.0)
    planner.take()
    planner.plan(0.0 + STALE_FRACTION * 1.0 + 0.01)
    assert planner.take() == SequenceFlags(ID_START + 1, start=True, end=False)


def test_the_event_loop_takes_its_own_send_time_and_nothing_planned_is_a_lone_sequence() -> None:
    """Breaks if a request made for a send time gets another send's flags, or if a
    request nothing was planned for (a library second opinion) is not START and END."""
    planner = _planner(length=3)
    planner.plan(0.0)
    planner.plan(0.5)
    assert planner.take(0.5) == SequenceFlags(ID_START, start=False, end=False)
    assert planner.take(0.0) == SequenceFlags(ID_START, start=True, end=False)
    assert planner.take() == SequenceFlags(ID_START + 1, start=True, end=True)


def test_gap_only_looks_ahead() -> None:
    """Breaks if asking the gap changes the plan (a send the breaker then refuses must
    not shift the flags)."""
    planner = _planner(length=2)
    assert [planner.gap() for _ in range(3)] == [0.5, 0.5, 0.5]
    planner.plan(0.0)
    assert planner.gap() == planner.end_gap
    planner.plan(0.5)
    assert planner.take() == SequenceFlags(ID_START, start=True, end=False)
    assert planner.take() == SequenceFlags(ID_START, start=False, end=True)


def test_ids_cycle_through_their_range_and_string_ids_are_prefixed() -> None:
    """Breaks if ids leave [id_start, id_start + id_count) or a string-id model gets ints."""
    planner = _planner(length=1, id_count=3, first=2, string_ids=True)
    ids = [f.sequence_id for _, f in _replay(planner, 4)]
    assert ids == [f"tritonwatch-{ID_START + n}" for n in (2, 0, 1, 2)]
    assert planner.longest_id == f"tritonwatch-{ID_START + 2}"


def test_the_first_id_is_drawn_in_the_range() -> None:
    """Breaks if a planner without ``first`` starts outside its range (a restarted daemon
    must not reuse the sequence its last run left open, which a random start avoids)."""
    planner = SequencePlanner(rate=1.0, length=2, max_idle_seconds=1.0, id_start=5, id_count=7)
    planner.plan(0.0)
    assert 5 <= int(planner.take().sequence_id) < 12


def test_poisson_draws_only_the_gap_after_end() -> None:
    """Breaks if Poisson gaps come inside a sequence (one could pass half the idle time)
    or the gaps after END lose their mean."""
    planner = _planner(rate=1.0, length=4, poisson=random.Random(7))
    gaps, now = [], 0.0
    for _ in range(4000):
        gap = planner.gap()
        planner.plan(now)
        planner.take()
        gaps.append(gap)
        now += gap
    inside = {g for i, g in enumerate(gaps) if i % 4 != 3}
    assert inside == {0.5}
    after_end = [g for i, g in enumerate(gaps) if i % 4 == 3]
    assert len(set(after_end)) == len(after_end)
    assert statistics.mean(after_end) == pytest.approx(planner.end_gap, rel=0.1)


SEQUENCE_CONFIG = {
    "sequence_batching": {
        "direct": {},
        "control_input": [
            {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START"}]},
            {
                "name": "CORRID",
                "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_STRING"}],
            },
        ],
        "state": [{"input_name": "STATE_IN", "output_name": "STATE_OUT"}],
    }
}


def test_control_inputs_and_implicit_state_are_tritons_to_fill() -> None:
    """Breaks if a control input or an implicit-state input is not named (the canary
    would send it as data, which Triton refuses), or a plain model gets any."""
    assert control_inputs(SEQUENCE_CONFIG) == {"START", "CORRID", "STATE_IN"}
    assert control_inputs({"max_batch_size": 8}) == frozenset()
    assert control_inputs(None) == frozenset()


def test_a_string_corrid_is_recognised() -> None:
    """Breaks if a TYPE_STRING CORRID control input is missed or a UINT64 one taken for it."""
    assert string_correlation_id(SEQUENCE_CONFIG)
    corrid = {"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_UINT64"}
    uint = {"sequence_batching": {"control_input": [{"name": "C", "control": [corrid]}]}}
    assert not string_correlation_id(uint)
    assert not string_correlation_id(None)


def test_flags_become_the_three_request_parameters() -> None:
    """Breaks if the parameters' names differ from tritonclient's (Triton reads these)."""
    assert SequenceFlags(7, start=True, end=False).parameters() == {
        "sequence_id": 7,
        "sequence_start": True,
        "sequence_end": False,
    }
