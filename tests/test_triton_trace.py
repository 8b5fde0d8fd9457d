"""Triton's request trace as the benchmarks read it (benchmarks/triton_trace.py): a real
2.51 trace, split into two files as Triton writes a long one."""

from __future__ import annotations

import sys
from pathlib import Path

from support import fixtures_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from triton_trace import read_trace, residences_between

TRACE = fixtures_dir() / "triton_trace" / "batching-grpc.json"
LAST_SENT_NS, LAST_ANSWERED_NS = 19916219524191, 19916222925433
"""The client's own monotonic stamps around its last request (the fixture's note)."""


def test_both_parts_of_a_split_trace_are_read_and_every_request_is_whole() -> None:
    """Breaks if the reader misses Triton's ``.0``/``.1`` parts or pairs stamps of
    different requests: 60 requests were sent, each at least the model's 2 ms."""
    trace = read_trace(TRACE)
    assert len(trace) == 60
    assert all(r.read_ns < r.sent_ns for r in trace)
    assert min(r.seconds for r in trace) > 2e-3
    assert [r.read_ns for r in trace] == sorted(r.read_ns for r in trace)


def test_the_servers_stamps_lie_inside_the_clients_monotonic_stamps() -> None:
    """Breaks if the residence were taken from other stamps than the gRPC front end's
    read and send (the span must fit inside what the client measured)."""
    last = read_trace(TRACE)[-1]
    assert LAST_SENT_NS < last.read_ns < last.sent_ns < LAST_ANSWERED_NS
    assert 2.8e-3 < last.seconds < (LAST_ANSWERED_NS - LAST_SENT_NS) * 1e-9


def test_a_window_keeps_only_the_requests_read_inside_it() -> None:
    trace = read_trace(TRACE)
    inside = residences_between(trace, trace[10].read_ns, trace[19].read_ns)
    assert inside == [r.seconds for r in trace[10:20]]
