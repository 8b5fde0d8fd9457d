"""Bounded memory (issue 25, item 6): a server that sends a gibibyte costs the canary one
``too_large`` outcome, its connection closed, the rest never read, and no memory to
speak of: a real ModelCanary on the real engine against loopback servers that claim or
send 1 GiB (a Content-Length, a chunked body, a gzip bomb, HTTP/2 DATA frames).

The memory bound is a bound, not a measurement: the process's resident set, sampled
while the canary runs, must not grow by 200 MiB (the default limit is 16 MiB an
answer); without the limits each of these answers would take a gibibyte or more.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hpack
import pytest
from answer_server_support import (
    AnswerServer,
    answer_server,
    answer_with,
    flood,
    http_answer,
    http_plan,
    outcome_count,
    run_canary,
)
from engine_support import RawServer, raw_server

from tritonwatch.probe.canary.clients import client_for
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.http2 import DATA, END_HEADERS, HEADERS, SETTINGS, frame_bytes
from tritonwatch.wire.limits import AnswerLimits

GIB = 1 << 30
MIB = 1 << 20
RSS_GROWTH_BOUND = 200 * MIB


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@contextlib.contextmanager
def _peak_rss_growth() -> Iterator[list[int]]:
    """Samples the resident set every few milliseconds while the block runs; the list
    holds the largest growth over the start once it ends."""
    start, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], _rss() - start)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()
        peak[0] = max(peak[0], _rss() - start)


def _too_large(stats: CanaryBoard, _engine: Any) -> bool:
    return outcome_count(stats, Outcome.TOO_LARGE) >= 1


def _run_http(head: bytes, piece: bytes) -> tuple[Any, AnswerServer, int]:
    ref: list[AnswerServer] = []
    with answer_server(flood(ref, head, piece, GIB)) as server, _peak_rss_growth() as growth:
        ref.append(server)
        run = run_canary(
            http_plan(server, rate=2.0), client_for("http", server.url, ""), _too_large
        )
        assert server.closed_by_peer.wait(30), "the server was never cut off"
    return run, server, growth[0]


def _assert_cut_off(run: Any, server: AnswerServer, growth: int) -> None:
    assert run.outcomes().get(Outcome.TOO_LARGE, 0) >= 1
    assert run.outcomes().get(Outcome.CLIENT_ERROR, 0) == 0  # never retried on a library
    assert server.sent_bytes < 256 * MIB  # we stopped reading: the rest never went out
    assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth >> 20} MiB"


def test_a_content_length_of_one_gib_is_too_large_before_its_body_is_read() -> None:
    """Breaks if a 1 GiB Content-Length is read (or buffered) instead of refused at
    the head, or the connection is kept open reading it."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % GIB
    run, server, growth = _run_http(head, bytes(MIB))
    _assert_cut_off(run, server, growth)
    failed = next(log for log in run.logs if log["event"] == "canary_request_failed")
    assert failed["outcome"] == "too_large"
    assert "a Content-Length of 1073741824 bytes is over" in failed["error"]


def test_a_chunked_body_without_end_is_too_large_at_the_limit() -> None:
    """Breaks if a chunked answer is gathered past canary.limits.max_answer_bytes."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n" % MIB + bytes(MIB) + b"\r\n"
    run, server, growth = _run_http(head, chunk)
    _assert_cut_off(run, server, growth)
    failed = next(log for log in run.logs if log["event"] == "canary_request_failed")
    assert "a chunked body of" in failed["error"]


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """1 GiB of zeros, gzipped: about a megabyte on the wire."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    return b"".join([*(packer.compress(zeros) for _ in range(1024)), packer.flush()])


def test_a_gzip_bomb_is_too_large_when_inflated_past_the_limit(gzip_bomb: bytes) -> None:
    """Breaks if a compressed answer is inflated past the limit (1 GiB in memory)."""
    answer = http_answer(gzip_bomb, "Content-Encoding: gzip")
    with answer_server(answer_with(answer)) as server, _peak_rss_growth() as growth:
        run = run_canary(
            http_plan(server, rate=2.0), client_for("http", server.url, ""), _too_large
        )
    assert run.outcomes().get(Outcome.CLIENT_ERROR, 0) == 0
    assert growth[0] < RSS_GROWTH_BOUND, f"RSS grew by {growth[0] >> 20} MiB"
    failed = next(log for log in run.logs if log["event"] == "canary_request_failed")
    assert failed["error"] == "the gzip body inflates past 16 MiB, canary.limits.max_answer_bytes"


def test_a_configured_limit_holds_when_an_answer_is_inflated() -> None:
    """Breaks if inflating a compressed answer holds to the default 16 MiB instead of
    the ``canary.limits.max_answer_bytes`` configured (64 KiB here)."""
    packed = zlib.compressobj(1, zlib.DEFLATED, 31)
    inflating = packed.compress(bytes(MIB)) + packed.flush()  # 1 MiB once inflated
    answer = http_answer(inflating, "Content-Encoding: gzip")
    plan_limits = AnswerLimits(max_answer_bytes=64 * 1024)
    with answer_server(answer_with(answer)) as server:
        run = run_canary(
            http_plan(server, rate=2.0, limits=plan_limits),
            client_for("http", server.url, ""),
            lambda stats, _engine: sum(stats.snapshot(0)[0].outcomes.values()) >= 2,
        )
    assert run.outcomes()[Outcome.TOO_LARGE] >= 2
    failed = next(log for log in run.logs if log["event"] == "canary_request_failed")
    assert failed["error"] == "the gzip body inflates past 64 KiB, canary.limits.max_answer_bytes"


# -- HTTP/2 ----------------------------------------------------------------------------


def _h2_flood(claimed: int, sent: list[int], closed: threading.Event) -> Any:
    """A gRPC server that answers the first call with a message claiming ``claimed``
    bytes, then DATA frames of zeros regardless of flow control, up to 1 GiB."""
    encoder = hpack.Encoder()
    headers = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])

    def behaviour(conn: socket.socket, _server: RawServer) -> None:
        conn.recv(65536)  # the preface and the call (the first read holds them here)
        conn.sendall(frame_bytes(SETTINGS, 0, 0) + frame_bytes(HEADERS, END_HEADERS, 1, headers))
        frames = frame_bytes(DATA, 0, 1, struct.pack(">BI", 0, claimed) + bytes(16_379))
        frame = frame_bytes(DATA, 0, 1, bytes(16_384))
        try:
            conn.sendall(frames)
            while sent[0] < GIB:
                conn.sendall(frame * 16)
                sent[0] += 16 * 16_384
        except OSError:
            closed.set()

    return behaviour


@pytest.mark.parametrize(
    ("claimed", "error"),
    [
        pytest.param(GIB, "a gRPC message of 1073741824 bytes is over", id="prefix-claims-1GiB"),
        pytest.param(10, "a gRPC message's DATA of", id="data-floods-past-the-prefix"),
    ],
)
def test_http2_data_flooding_a_call_is_too_large(claimed: int, error: str) -> None:
    """Breaks if the engine's HTTP/2 client gathers a call's DATA past the limit (a
    message's length prefix of 1 GiB is refused at once; DATA past a small prefix at
    16 MiB), or keeps reading the connection."""
    sent, closed = [0], threading.Event()
    with (
        answer_server(answer_with(b"")) as api,
        raw_server(_h2_flood(claimed, sent, closed)) as h2,
        _peak_rss_growth() as growth,
    ):
        url = f"grpc://127.0.0.1:{h2.port}"
        plan = http_plan(api, protocol="grpc", grpc_url=url, rate=2.0)
        client = client_for("grpc", api.url, url)  # its model APIs over the HTTP server
        run = run_canary(plan, client, _too_large)
        assert closed.wait(30), "the server was never cut off"
    assert run.outcomes().get(Outcome.CLIENT_ERROR, 0) == 0
    assert sent[0] < 256 * MIB
    assert growth[0] < RSS_GROWTH_BOUND, f"RSS grew by {growth[0] >> 20} MiB"
    failed = next(log for log in run.logs if log["event"] == "canary_request_failed")
    assert failed["outcome"] == "too_large"
    assert error in failed["error"]
