"""Each reader of a server's bytes holds to canary.limits, refusing at the size claimed
or the size sent, and the refusal is the outcome too_large (wire/limits.py)."""

from __future__ import annotations

import asyncio
import struct

import hpack
import pytest

from tritonwatch.config.canary_schema import CanaryLimits
from tritonwatch.probe.canary.clients import classify_error
from tritonwatch.probe.canary.engine_http1 import HeadedConnection, StreamBody
from tritonwatch.probe.canary.engine_wires import Http1Wire
from tritonwatch.probe.canary.library_path import ClientFaultError, answer_start, doubted
from tritonwatch.records.observations import Outcome
from tritonwatch.wire.http1 import Http1Connection, HttpProtocolError, response_head
from tritonwatch.wire.http2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    HEADERS,
    SETTINGS,
    ClientSession,
    frame_bytes,
    grpc_unary_request,
)
from tritonwatch.wire.limits import (
    DEFAULT_LIMITS,
    AnswerLimits,
    AnswerTooLargeError,
    HttpRequest,
)

SMALL = AnswerLimits(max_answer_bytes=100_000, max_header_bytes=2048, http2_window=70_000)


def test_the_probe_defaults_are_the_configs() -> None:
    """Breaks if canary.limits' defaults (config/canary_schema.py) and the readers' own
    (wire/limits.py, which imports no config) part."""
    assert AnswerLimits(**CanaryLimits().model_dump()) == DEFAULT_LIMITS
    assert AnswerLimits(16 << 20, 64 << 10, 1 << 20) == DEFAULT_LIMITS


def test_too_large_is_its_outcome_and_no_doubt() -> None:
    """Breaks if an answer over a bound is billed as a bad response, or sent again on a
    library (which would read the same gibibyte)."""
    error = AnswerTooLargeError("x")
    assert classify_error(error, "http") == Outcome.TOO_LARGE
    assert classify_error(error, "grpc") == Outcome.TOO_LARGE
    assert not doubted(error)
    assert doubted(HttpProtocolError("bad status line"))
    fault = ClientFaultError(HttpProtocolError("bad"), "HTTP/1.1 200 OK")
    assert classify_error(fault, "http") == Outcome.CLIENT_ERROR


def test_a_request_carries_its_limits_to_the_parser() -> None:
    """Breaks if the engine's parser reads an answer under the defaults when the
    canary's request says otherwise."""
    request = HttpRequest(b"POST / HTTP/1.1\r\n\r\n", SMALL)
    assert HttpRequest(b"plain").limits is DEFAULT_LIMITS
    assert HeadedConnection.for_request(request).limits is SMALL
    wire = Http1Wire(request)  # what one engine connection speaks
    assert wire.start() == b"POST / HTTP/1.1\r\n\r\n"
    with pytest.raises(AnswerTooLargeError, match="Content-Length of 100001 bytes"):
        wire.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100001\r\n\r\n", 0.0)


def test_http1_refuses_a_content_length_over_the_limit_at_the_head() -> None:
    """Breaks if a Content-Length over max_answer_bytes is waited for instead of refused
    as soon as the head is read."""
    parser = HeadedConnection(SMALL)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100001\r\n\r\n"
    with pytest.raises(AnswerTooLargeError, match="Content-Length of 100001 bytes"):
        parser.feed(head)
    ok = HeadedConnection(SMALL)
    assert ok.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc") == (200, b"abc")


def test_http1_refuses_a_chunked_body_once_it_passes_the_limit() -> None:
    """Breaks if a chunked body is gathered past max_answer_bytes, or one within it is
    not read whole (it is decoded read by read)."""
    parser = HeadedConnection(SMALL)
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 40_000 + bytes(40_000) + b"\r\n"
    assert parser.feed(chunk) is None
    assert parser.feed(chunk) is None
    with pytest.raises(AnswerTooLargeError, match="a chunked body of 120000 bytes"):
        parser.feed(chunk)
    whole = HeadedConnection(SMALL)
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + b"0\r\n\r\n"
    pieces = [answer[i : i + 7000] for i in range(0, len(answer), 7000)]
    results = [whole.feed(piece) for piece in pieces]
    assert results[-1] == (200, bytes(40_000))
    assert results[:-1] == [None] * (len(pieces) - 1)


def test_http1_refuses_a_head_without_end_past_max_header_bytes() -> None:
    """Breaks if a head that never ends is buffered without bound."""
    parser = HeadedConnection(SMALL)
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(AnswerTooLargeError, match="a response head without end"):
        parser.feed(b"X-Junk: " + b"a" * 3000)


def test_http1_keeps_the_start_of_an_answer_it_could_not_read() -> None:
    """Breaks if a parse error loses the bytes the client_error line shows."""
    parser = HeadedConnection()
    with pytest.raises(HttpProtocolError) as caught:
        parser.feed(b"HTTX/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert caught.value.answer_start.startswith(b"HTTX/1.1 200 OK")
    assert answer_start(caught.value.answer_start) == "HTTX/1.1 200 OK\\r"
    assert answer_start(b"\n\x01m\x00") == "\\n\\x01m\\x00"  # binary: no lines


class _Transport(asyncio.Transport):
    """What an HTTP/1.1 connection writes to: it only notes an abort."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass


def test_http1_refuses_bytes_nobody_asked_for_past_every_bound() -> None:
    """Breaks if bytes that arrive while no request waits (a server that talks out of
    turn) are buffered without end: past the head and body bounds together the
    connection is dropped, and its next request fails as too large."""
    connection = Http1Connection(SMALL)
    transport = _Transport()
    connection.connection_made(transport)
    bound = SMALL.max_header_bytes + SMALL.max_answer_bytes
    connection.data_received(bytes(bound))  # at the bound: kept (a request may come)
    assert not transport.aborted
    connection.data_received(b"\0")
    assert transport.aborted
    with pytest.raises(AnswerTooLargeError, match="bytes nobody asked for"):
        asyncio.run(connection.request(b"GET / HTTP/1.1\r\n\r\n"))


def test_a_streamed_body_is_bounded_in_total() -> None:
    """Breaks if a stream (generate_stream, SSE) may send without end."""
    head = response_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert head is not None
    body = StreamBody(head, SMALL)
    chunk = b"%x\r\n" % 60_000 + bytes(60_000) + b"\r\n"
    assert body.feed(chunk) == bytes(60_000)
    with pytest.raises(AnswerTooLargeError, match="a streamed body"):
        body.feed(chunk)
    claimed = response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
    assert claimed is not None
    with pytest.raises(AnswerTooLargeError, match="Content-Length"):
        StreamBody(claimed, SMALL)


# -- HTTP/2 ----------------------------------------------------------------------------


def _session() -> ClientSession:
    """A session that sent one call under SMALL and read the server's SETTINGS."""
    session = ClientSession()
    session.start(grpc_unary_request("h:1", "/p", b"m", 1.0, SMALL))
    session.feed(frame_bytes(SETTINGS, 0, 0))
    return session


def test_http2_advertises_the_configured_window() -> None:
    """Breaks if the client still offers a 2**31-1 window (a server may then send 2 GiB
    before the client has read any of it)."""
    session = ClientSession()
    first = session.start(grpc_unary_request("h:1", "/p", b"m", 1.0, SMALL))
    settings_frame = first[24 : 24 + 9 + 12]
    assert settings_frame[9:] == struct.pack(">HIHI", 2, 0, 4, 70_000)
    assert first[24 + 21 : 24 + 21 + 13] == frame_bytes(
        0x8, 0, 0, struct.pack(">I", 70_000 - 65_535)
    )


def test_http2_refuses_a_message_whose_prefix_is_over_the_limit() -> None:
    """Breaks if a gRPC length prefix of 1 GiB is waited for instead of refused."""
    session = _session()
    headers = hpack.Encoder().encode([(":status", "200")])
    session.feed(frame_bytes(HEADERS, END_HEADERS, 1, headers))
    with pytest.raises(AnswerTooLargeError, match="a gRPC message of 1073741824 bytes"):
        session.feed(frame_bytes(DATA, 0, 1, struct.pack(">BI", 0, 1 << 30)))


def test_http2_refuses_data_past_the_limit() -> None:
    """Breaks if DATA on the call's stream is gathered past max_answer_bytes."""
    session = _session()
    headers = hpack.Encoder().encode([(":status", "200")])
    session.feed(frame_bytes(HEADERS, END_HEADERS, 1, headers))
    session.feed(frame_bytes(DATA, 0, 1, struct.pack(">BI", 0, 10) + bytes(16_000)))
    for _ in range(5):  # 16000 + 5 × 16384 bytes: within 100000
        session.feed(frame_bytes(DATA, 0, 1, bytes(16_384)))
    with pytest.raises(AnswerTooLargeError, match="a gRPC message's DATA of 114304 bytes"):
        session.feed(frame_bytes(DATA, 0, 1, bytes(16_384)))


def test_http2_refuses_a_streaming_calls_data_past_the_limit_in_total() -> None:
    """Breaks if a stream of messages, each far under max_answer_bytes, may go on
    without end (a token stream that never stops): its DATA together is bounded."""
    session = ClientSession()
    session.start(grpc_unary_request("h:1", "/p", b"m", 1.0, SMALL), streaming=True)
    session.feed(frame_bytes(SETTINGS, 0, 0))
    headers = hpack.Encoder().encode([(":status", "200")])
    session.feed(frame_bytes(HEADERS, END_HEADERS, 1, headers))
    token = frame_bytes(DATA, 0, 1, struct.pack(">BI", 0, 16_379) + bytes(16_379))
    for _ in range(6):  # 6 × 16384 bytes: within 100000
        assert session.feed(token) is None
        assert session.take_messages() == [bytes(16_379)]
    with pytest.raises(AnswerTooLargeError, match="a gRPC stream's DATA of 114688 bytes"):
        session.feed(token)


def test_http2_refuses_a_header_block_past_max_header_bytes() -> None:
    """Breaks if CONTINUATION frames may grow a header block without bound."""
    session = _session()
    session.feed(frame_bytes(HEADERS, 0, 1, b"\x00" * 1000))
    session.feed(frame_bytes(CONTINUATION, 0, 1, b"\x00" * 1000))
    with pytest.raises(AnswerTooLargeError, match="an HTTP/2 header block of 3000 bytes"):
        session.feed(frame_bytes(CONTINUATION, 0, 1, b"\x00" * 1000))


def test_http2_refuses_a_header_list_that_decodes_past_max_header_bytes() -> None:
    """Breaks if a small block that decodes to a huge header list is accepted."""
    session = _session()
    encoder = hpack.Encoder()
    block = encoder.encode([(":status", "200"), ("x-big", "v" * 1500), ("x-more", "w" * 1500)])
    with pytest.raises(AnswerTooLargeError, match="header list"):
        session.feed(frame_bytes(HEADERS, END_HEADERS, 1, block))


def test_a_size_at_the_limit_is_read_and_one_byte_more_is_refused_naming_both() -> None:
    """Breaks if an answer or a head of exactly the configured size is refused, one a byte
    over it is read, or the refusal does not say what was too large and which limit."""
    SMALL.check_answer(100_000, "a body")
    SMALL.check_header(2048, "a head")
    with pytest.raises(AnswerTooLargeError) as answer:
        SMALL.check_answer(100_001, "a body")
    assert str(answer.value) == (
        "a body of 100001 bytes is over canary.limits.max_answer_bytes (100000)"
    )
    with pytest.raises(AnswerTooLargeError) as header:
        SMALL.check_header(2049, "a head")
    assert str(header.value) == "a head of 2049 bytes is over canary.limits.max_header_bytes (2048)"
