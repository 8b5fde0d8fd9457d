"""wire/http2.py against hand-built server frames, header blocks from a real HPACK encoder.

The server side here is ``hpack.Encoder`` (it indexes and Huffman-codes, as a gRPC
server's does) and frames laid out byte by byte from RFC 9113, so every test holds the
client to the wire format, not to itself; answers are also fed split at every byte.
"""

from __future__ import annotations

import struct

import hpack
import pytest

from tritonwatch.wire import http2
from tritonwatch.wire.http2 import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_FRAME,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ClientSession,
    GrpcReply,
    Http2ClosedError,
    Http2Error,
    frame_bytes,
    grpc_timeout,
    grpc_unary_request,
)

PATH = "/inference.GRPCInferenceService/ModelInfer"
SERVER_SETTINGS = frame_bytes(SETTINGS, 0, 0, struct.pack(">HI", 4, 1 << 20))


def _frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each frame in ``data``."""
    out = []
    while data:
        length = int.from_bytes(data[:3], "big")
        stream = struct.unpack_from(">I", data, 5)[0]
        out.append((data[3], data[4], stream, data[9 : 9 + length]))
        data = data[9 + length :]
    return out


def _message(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


class Server:
    """A gRPC server's side of one connection: its encoder keeps the dynamic table."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()

    def headers(self, stream: int, fields: list[tuple[str, str]], flags: int = 0) -> bytes:
        return frame_bytes(HEADERS, END_HEADERS | flags, stream, self.encoder.encode(fields))

    def answer(self, stream: int, payload: bytes, status: str = "0", message: str = "") -> bytes:
        """Response headers, one DATA frame with the message, trailers."""
        trailers = [("grpc-status", status)] + ([("grpc-message", message)] if message else [])
        return (
            self.headers(stream, [(":status", "200"), ("content-type", "application/grpc")])
            + frame_bytes(DATA, 0, stream, _message(payload))
            + self.headers(stream, trailers, END_STREAM)
        )


def _started(session: ClientSession | None = None, message: bytes = b"ask") -> ClientSession:
    session = session or ClientSession()
    session.start(grpc_unary_request("127.0.0.1:8001", PATH, message, 2.0))
    return session


def test_the_request_is_a_preface_then_literal_headers_and_data_on_odd_streams() -> None:
    """Breaks if the preface, the SETTINGS (push off, the default 1 MiB window of
    canary.limits), the connection WINDOW_UPDATE, a header a gRPC server needs, the stream id patching or the
    message's framing is off."""
    request = grpc_unary_request("127.0.0.1:8001", PATH, b"hello", 2.0)
    session = ClientSession()
    first = session.start(request)
    assert first.startswith(PREFACE)
    frames = _frames(first[len(PREFACE) :])
    assert frames[0] == (SETTINGS, 0, 0, struct.pack(">HIHI", 2, 0, 4, 1 << 20))
    assert frames[1] == (WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 20) - 65_535))
    kind, flags, stream, block = frames[2]
    assert (kind, flags, stream) == (HEADERS, END_HEADERS, 1)
    assert hpack.Decoder().decode(block) == [
        (":method", "POST"), (":scheme", "http"), (":path", PATH),
        (":authority", "127.0.0.1:8001"), ("content-type", "application/grpc"),
        ("te", "trailers"), ("grpc-timeout", "2000m"),
    ]  # fmt: skip
    assert frames[3] == (DATA, END_STREAM, 1, _message(b"hello"))
    session.feed(SERVER_SETTINGS + Server().answer(1, b"x"))
    second = _frames(session.start(request))
    assert second[0] == (SETTINGS, ACK, 0, b"")  # owed from the first answer's SETTINGS
    assert [(f[0], f[2]) for f in second[1:]] == [(HEADERS, 3), (DATA, 3)]


def test_a_large_message_goes_in_max_frame_data_frames_and_too_large_is_refused() -> None:
    """Breaks if a DATA frame exceeds the 16 KiB every peer takes, END_STREAM is not
    on the last one only, or a message over the default window is built anyway."""
    message = bytes(range(256)) * 160  # 40 KiB
    request = grpc_unary_request("h:1", PATH, message, 1.0)
    data = [f for f in _frames(request.for_stream(7)) if f[0] == DATA]
    assert [len(f[3]) for f in data] == [MAX_FRAME, MAX_FRAME, len(message) + 5 - 2 * MAX_FRAME]
    assert [f[1] for f in data] == [0, 0, END_STREAM]
    assert {f[2] for f in data} == {7}
    assert b"".join(f[3] for f in data) == _message(message)
    assert request.data_length == len(message) + 5
    with pytest.raises(ValueError, match="exceeds"):
        grpc_unary_request("h:1", PATH, bytes(65_531), 1.0)


def test_an_answer_split_at_every_byte_reads_the_same() -> None:
    """Breaks if a frame header, a payload, a header block or a gRPC prefix split
    across reads is misread, or a reply is handed back before its trailers."""
    answer = SERVER_SETTINGS + Server().answer(1, b"result bytes")
    expected = GrpcReply(0, "", b"result bytes")
    for cut in range(len(answer) + 1):
        session = _started()
        first = session.feed(answer[:cut])
        second = session.feed(answer[cut:])
        assert (first, second) == ((None, expected) if cut < len(answer) else (expected, None))
    session = _started()
    replies = [session.feed(answer[i : i + 1]) for i in range(len(answer))]
    assert replies[:-1] == [None] * (len(answer) - 1)
    assert replies[-1] == expected


def test_a_streaming_calls_messages_come_whole_as_they_arrive_split_anywhere() -> None:
    """Breaks if a streaming call's messages (ModelStreamInfer's responses) are held to
    the end, handed on before they are whole, merged or reordered when one DATA frame
    carries two or one message spans two frames, or if its reply carries a message."""
    server = Server()
    one, two, three = _message(b"first"), _message(b"second"), _message(b"third")
    answer = (
        SERVER_SETTINGS
        + server.headers(1, [(":status", "200"), ("content-type", "application/grpc")])
        + frame_bytes(DATA, 0, 1, one + two[:4])
        + frame_bytes(DATA, 0, 1, two[4:] + three)
        + server.headers(1, [("grpc-status", "0")], END_STREAM)
    )
    for cut in range(len(answer) + 1):
        session = ClientSession()
        session.start(grpc_unary_request("h:1", PATH, b"ask", 2.0), streaming=True)
        reply = session.feed(answer[:cut])
        taken = session.take_messages()
        reply = reply or session.feed(answer[cut:])
        assert taken + session.take_messages() == [b"first", b"second", b"third"]
        assert reply == GrpcReply(0, "", b"")
    session = ClientSession()
    session.start(grpc_unary_request("h:1", PATH, b"ask", 2.0), streaming=True)
    head = answer.index(frame_bytes(DATA, 0, 1, one + two[:4]))
    session.feed(answer[: head + 9 + len(one) + 4])  # the first message and part of the next
    assert session.take_messages() == [b"first"]


def test_header_blocks_are_decoded_through_the_servers_dynamic_table() -> None:
    """Breaks if the decoder's table is not kept across calls (the second answer's
    headers are indexed references) or a block for another stream is skipped."""
    server = Server()
    session = _started()
    assert session.feed(SERVER_SETTINGS + server.answer(1, b"one")) == GrpcReply(0, "", b"one")
    # A block on a stream nobody waits for still changes the table; then stream 3.
    unrelated = server.headers(99, [("x-custom", "indexed-value")])
    _started(session)
    answer = server.answer(3, b"two") + server.headers(3, [("x-custom", "indexed-value")])
    assert session.feed(unrelated + answer) == GrpcReply(0, "", b"two")


def test_a_repeated_header_block_is_decoded_once_until_the_table_moves() -> None:
    """Breaks if the same block bytes are decoded again while the dynamic table holds
    (the CPU the memo saves), or a remembered block is reused after the table changed
    (the same indexed reference then names another field)."""
    server, session = Server(), _started()
    ok = server.headers(1, [(":status", "200"), ("grpc-status", "0")], END_STREAM)
    assert session.feed(SERVER_SETTINGS + ok) == GrpcReply(0, "", b"")
    newest = bytes([0x88, 0x80 | 62])  # :status 200 (static 8), the newest dynamic entry
    decodes = []
    real_decode = session._decoder.decode
    session._decoder.decode = lambda *a, **k: decodes.append(1) or real_decode(*a, **k)  # type: ignore[method-assign]
    for stream in (3, 5):
        _started(session)
        block = frame_bytes(HEADERS, END_HEADERS | END_STREAM, stream, newest)
        assert session.feed(block) == GrpcReply(0, "", b"")
    assert len(decodes) == 1
    _started(session)
    unavailable = server.headers(7, [(":status", "200"), ("grpc-status", "14")], END_STREAM)
    assert session.feed(unavailable) == GrpcReply(14, "", b"")
    _started(session)
    block = frame_bytes(HEADERS, END_HEADERS | END_STREAM, 9, newest)
    assert session.feed(block) == GrpcReply(14, "", b"")  # the newest entry is now "14"


def test_settings_and_pings_are_acknowledged_acks_are_not() -> None:
    """Breaks if SETTINGS or a PING goes unanswered (the server waits, then gives up),
    or an acknowledgement is acknowledged."""
    session = _started()
    session.feed(SERVER_SETTINGS + frame_bytes(PING, 0, 0, b"12345678"))
    session.feed(frame_bytes(PING, ACK, 0, b"abcdefgh") + frame_bytes(SETTINGS, ACK, 0))
    assert _frames(session.take_output()) == [(SETTINGS, ACK, 0, b""), (PING, ACK, 0, b"12345678")]
    assert session.take_output() == b""


def test_a_trailers_only_error_gives_the_status_and_the_percent_decoded_message() -> None:
    """Breaks if a trailers-only answer (how Triton refuses a missing model) is not a
    reply, or grpc-message is left percent-encoded."""
    session = _started()
    fields = [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "5"),
              ("grpc-message", "Request for unknown model: 'nope' is not found%E2%9C%93")]  # fmt: skip
    reply = session.feed(SERVER_SETTINGS + Server().headers(1, fields, END_STREAM))
    assert reply == GrpcReply(5, "Request for unknown model: 'nope' is not found\u2713", b"")
    assert reply.status_name == "StatusCode.NOT_FOUND"
    assert GrpcReply(99, "", b"").status_name == "StatusCode.99"


def test_a_non_200_status_is_a_grpc_status_as_grpc_maps_it() -> None:
    """Breaks if an HTTP error answer (a proxy's 503) is read as a gRPC answer."""
    session = _started()
    reply = session.feed(SERVER_SETTINGS + Server().headers(1, [(":status", "503")]))
    assert reply == GrpcReply(14, "Received http2 header with status: 503", b"")


def test_rst_stream_and_goaway_before_the_call_are_errors_goaway_after_it_is_not() -> None:
    """Breaks if a reset stream or a GOAWAY that excludes the call is not an error, or a
    GOAWAY that includes it loses its answer or leaves the connection usable."""
    session = _started()
    with pytest.raises(Http2ClosedError, match="REFUSED_STREAM"):
        session.feed(SERVER_SETTINGS + frame_bytes(RST_STREAM, 0, 1, struct.pack(">I", 7)))
    session = _started()
    goaway = frame_bytes(GOAWAY, 0, 0, struct.pack(">II", 0, 0) + b"shutting down")
    with pytest.raises(Http2ClosedError, match="NO_ERROR: shutting down"):
        session.feed(SERVER_SETTINGS + goaway)
    session = _started()
    goaway = frame_bytes(GOAWAY, 0, 0, struct.pack(">II", 1, 0))
    assert session.feed(SERVER_SETTINGS + goaway + Server().answer(1, b"a")) == GrpcReply(
        0, "", b"a"
    )
    assert session.going_away
    assert not session.can_send(grpc_unary_request("h:1", PATH, b"", 1.0))


def test_continuation_padding_and_priority_are_read() -> None:
    """Breaks if a header block split into CONTINUATION frames, padded DATA or padded
    HEADERS with priority fields are misread."""
    server = Server()
    block = server.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    headers = (
        frame_bytes(HEADERS, PADDED | PRIORITY_FLAG, 1, b"\x02" + bytes(5) + block[:2] + b"\0\0")
        + frame_bytes(CONTINUATION, 0, 1, block[2:4])
        + frame_bytes(CONTINUATION, END_HEADERS, 1, block[4:])
    )
    data = frame_bytes(DATA, PADDED, 1, b"\x03" + _message(b"padded") + b"\0\0\0")
    trailers = server.headers(1, [("grpc-status", "0")], END_STREAM)
    session = _started()
    assert session.feed(SERVER_SETTINGS + headers + data + trailers) == GrpcReply(0, "", b"padded")
    session = _started()
    interrupted = frame_bytes(HEADERS, 0, 1, block[:2]) + frame_bytes(PING, 0, 0, bytes(8))
    with pytest.raises(Http2Error, match="CONTINUATION was due"):
        session.feed(SERVER_SETTINGS + interrupted)


@pytest.mark.parametrize(
    ("answer", "fault"),
    [
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "no HTTP/2 server"),
        (frame_bytes(PING, 0, 0, bytes(8)), "first frame"),
        (SERVER_SETTINGS + frame_bytes(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff"),
         "undecodable header block"),
        (SERVER_SETTINGS + frame_bytes(DATA, 0, 1, b"early"), "before the response headers"),
        (SERVER_SETTINGS + frame_bytes(SETTINGS, 0, 0, b"12345"), "SETTINGS of 5 bytes"),
        (SERVER_SETTINGS + frame_bytes(WINDOW_UPDATE, 0, 0, bytes(4)), "WINDOW_UPDATE of 0"),
        (SERVER_SETTINGS + frame_bytes(0x5, END_HEADERS, 1, bytes(4)), "PUSH_PROMISE"),
    ],
    ids=["http1", "no-settings", "hpack", "data-first", "settings", "window", "push"],
)  # fmt: skip
def test_a_broken_answer_is_an_http2_error_naming_the_fault(answer: bytes, fault: str) -> None:
    """Breaks if a malformed frame is read as an answer or raises anything but
    Http2Error (the canary's bad_response), or the error does not say what broke."""
    session = _started()
    with pytest.raises(Http2Error, match=fault):
        session.feed(answer)


@pytest.mark.parametrize(
    ("prefix", "fault"),
    [
        (struct.pack(">BI", 1, 3) + b"abc", "compressed"),
        (struct.pack(">BI", 0, 9) + b"abc", "says"),
    ],
)
def test_a_bad_grpc_message_prefix_is_an_http2_error(prefix: bytes, fault: str) -> None:
    """Breaks if a compressed message (none was offered) or one whose prefix says
    another length is handed on as a response."""
    server = Server()
    answer = (
        server.headers(1, [(":status", "200")])
        + frame_bytes(DATA, 0, 1, prefix)
        + server.headers(1, [("grpc-status", "0")], END_STREAM)
    )
    with pytest.raises(Http2Error, match=fault):
        _started().feed(SERVER_SETTINGS + answer)


def test_consumed_data_is_given_back_once_half_a_window_is_used() -> None:
    """Breaks if the client never replenishes the connection or stream window (a long
    run stalls once the server's sends exhaust it) or replenishes every frame."""
    session = _started(ClientSession(window=100_000))
    server = Server()
    session.feed(SERVER_SETTINGS + server.headers(1, [(":status", "200")]))
    session.take_output()
    chunk = frame_bytes(DATA, 0, 1, bytes(MAX_FRAME))
    session.feed(chunk * 3)  # 49152 bytes: under half
    assert session.take_output() == b""
    session.feed(chunk)  # 65536: over half of 100000
    updates = _frames(session.take_output())
    assert updates == [
        (WINDOW_UPDATE, 0, 0, struct.pack(">I", 4 * MAX_FRAME)),
        (WINDOW_UPDATE, 0, 1, struct.pack(">I", 4 * MAX_FRAME)),
    ]


def test_one_call_at_a_time_and_the_servers_window_is_respected() -> None:
    """Breaks if a second call starts while one is in flight, or a call is sent that
    the server's flow-control window cannot take."""
    request = grpc_unary_request("h:1", PATH, bytes(40_000), 1.0)
    session = ClientSession()
    session.start(request)
    assert not session.can_send(request)
    with pytest.raises(ValueError, match="cannot start"):
        session.start(request)
    session.feed(SERVER_SETTINGS + Server().answer(1, b""))
    assert not session.can_send(request)  # 40005 of 65535 used, the server gave none back
    session.feed(frame_bytes(WINDOW_UPDATE, 0, 0, struct.pack(">I", 40_005)))
    assert session.can_send(request)


@pytest.mark.parametrize(
    ("seconds", "header"),
    [(2.0, "2000m"), (0.0001, "1m"), (0.0015, "2m"), (200_000.0, "200000S"), (1e9, "16666667M")],
)
def test_grpc_timeout_rounds_up_in_at_most_eight_digits(seconds: float, header: str) -> None:
    """Breaks if the deadline is sent shorter than asked or in more digits than gRPC reads."""
    assert grpc_timeout(seconds) == header


def test_a_literal_header_integer_past_its_prefix_continues_in_seven_bit_groups() -> None:
    """Breaks if a header name or value of 127 bytes or more is mis-lengthed (RFC 7541 §5.1)."""
    value = "v" * 300
    assert hpack.Decoder().decode(http2.hpack_literal("x-long", value)) == [("x-long", value)]
    assert http2.hpack_integer(1337, 5) == bytes((31, 154, 10))  # the RFC's own example C.1.2
