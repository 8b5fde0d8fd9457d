"""wire/http2.py held to ``h2``, the library it replaces, on the same server bytes.

Hypothesis builds random but valid gRPC answers the way a server may lay them out —
its SETTINGS, PINGs, PRIORITY and unknown frames in between, a header block from a real
HPACK encoder (indexing, Huffman) cut into HEADERS and any number of CONTINUATION
frames, padding, the message cut into DATA frames anywhere, trailers or a trailers-only
answer — and feeds the bytes, split at random points, to our ``ClientSession`` and to an
``h2`` client connection that sent the same call. Both must read the same status, the
same message and the same trailers. Malformed answers (a frame rule of RFC 9113 broken)
must be refused by both, ours with its own error and nothing else.

One difference is known and left out of the examples: ``hyperframe`` refuses a padded
frame whose padding leaves an empty fragment (pad length equal to what follows the
Pad Length field), which RFC 9113 §6.1/§6.2 allow and ours reads; only non-empty pieces
are padded here. The planted-bug
tests break the code the way a slip would and require the differential to go red.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from urllib.parse import quote, unquote

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tritonwatch.wire import http2
from tritonwatch.wire.http2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PADDED,
    PING,
    PRIORITY_FLAG,
    SETTINGS,
    WINDOW_UPDATE,
    ClientSession,
    GrpcReply,
    Http2ClosedError,
    Http2Error,
    frame_bytes,
    grpc_unary_request,
)
from tritonwatch.wire.limits import AnswerTooLargeError

PATH = "/inference.GRPCInferenceService/ModelInfer"
AUTHORITY = "127.0.0.1:8001"
REQUEST = b"\x0a\x05model"
EXAMPLES = settings(
    max_examples=150, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip
"""Fixed examples, so the suite is the same on every run and host."""
OUR_ERRORS = (Http2Error, Http2ClosedError, AnswerTooLargeError)
PRIORITY = 2
UNKNOWN_TYPE = 0x21


@dataclass(frozen=True)
class Answer:
    """A server's bytes for stream 1, and what they mean."""

    wire: bytes
    status: int
    """The gRPC status a reader must report."""
    message: str
    payload: bytes


def _frames_of_block(
    block: bytes, cuts: list[int], end_stream: bool, pad: int, priority: bool
) -> bytes:
    """``block`` as HEADERS (padded, with priority if asked) and CONTINUATIONs at ``cuts``."""
    points = sorted({cut % (len(block) + 1) for cut in cuts})
    pieces = [block[a:b] for a, b in zip([0, *points], [*points, len(block)], strict=True)]
    flags = (END_STREAM if end_stream else 0) | (END_HEADERS if len(pieces) == 1 else 0)
    first = pieces[0]
    if priority:
        flags |= PRIORITY_FLAG
        first = struct.pack(">IB", 0, 15) + first
    if pad and pieces[0]:  # see _padded
        flags |= PADDED
        first = bytes([pad]) + first + b"\0" * pad
    out = bytearray(frame_bytes(HEADERS, flags, 1, first))
    for index, piece in enumerate(pieces[1:], start=2):
        out += frame_bytes(CONTINUATION, END_HEADERS if index == len(pieces) else 0, 1, piece)
    return bytes(out)


def _data_frames(body: bytes, cuts: list[int], pads: list[int], end_stream: bool) -> bytes:
    points = sorted({cut % (len(body) + 1) for cut in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    out = bytearray()
    for index, piece in enumerate(pieces):
        pad = pads[index % len(pads)] if pads else 0
        flags = END_STREAM if end_stream and index == len(pieces) - 1 else 0
        payload = piece
        if pad and piece:
            flags |= PADDED
            payload = bytes([pad]) + piece + b"\0" * pad
        out += frame_bytes(DATA, flags, 1, payload)
    return bytes(out)


_NAMES = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda name: not name.startswith("grpc-") and name not in {"te", "connection"}
)
_VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(str.strip)
_CUTS = st.lists(st.integers(0, 10_000), max_size=4)


@st.composite
def _noise(draw: st.DrawFn) -> bytes:
    """Frames a server may send between a call's frames, none of them about the call."""
    frames = draw(
        st.lists(st.sampled_from(["ping", "window", "priority", "unknown", "settings"]), max_size=3)
    )
    out = bytearray()
    for kind in frames:
        if kind == "ping":
            out += frame_bytes(PING, 0, 0, draw(st.binary(min_size=8, max_size=8)))
        elif kind == "window":
            out += frame_bytes(WINDOW_UPDATE, 0, 0, struct.pack(">I", draw(st.integers(1, 1000))))
        elif kind == "priority":
            out += frame_bytes(PRIORITY, 0, 3, struct.pack(">IB", 0, 7))
        elif kind == "unknown":
            out += frame_bytes(UNKNOWN_TYPE, 0, 0, draw(st.binary(max_size=20)))
        else:
            out += frame_bytes(SETTINGS, 0, 0, struct.pack(">HI", 3, draw(st.integers(1, 200))))
    return bytes(out)


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    """A valid answer to the call on stream 1: headers, message, trailers — or trailers only."""
    encoder = hpack.Encoder()
    encoder.huffman = draw(st.booleans())  # type: ignore[attr-defined]
    extra = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=4))
    status = draw(st.sampled_from([0, 0, 0, 3, 5, 13, 14]))
    text = draw(st.text(max_size=30))
    trailers = [("grpc-status", str(status))]
    if text:
        trailers.append(("grpc-message", quote(text)))
    settings_payload = struct.pack(">HI", 4, draw(st.integers(65_535, 1 << 20)))
    out = bytearray(frame_bytes(SETTINGS, 0, 0, settings_payload))
    out += draw(_noise())
    head = [(":status", "200"), ("content-type", "application/grpc"), *extra]
    if status and draw(st.booleans()):  # trailers-only, as gRPC answers an early error
        block = encoder.encode(head + trailers)
        out += _frames_of_block(
            block, draw(_CUTS), True, draw(st.integers(0, 9)), draw(st.booleans())
        )
        return Answer(bytes(out), status, unquote(quote(text)), b"")
    out += _frames_of_block(encoder.encode(head), draw(_CUTS), False, draw(st.integers(0, 9)),
                            draw(st.booleans()))  # fmt: skip
    payload = draw(st.binary(max_size=3000)) if status == 0 else b""
    body = struct.pack(">BI", 0, len(payload)) + payload if status == 0 else b""
    out += draw(_noise())
    out += _data_frames(body, draw(_CUTS), draw(st.lists(st.integers(0, 30), max_size=3)), False)
    out += draw(_noise())
    trailer_block = encoder.encode(trailers)
    out += _frames_of_block(trailer_block, draw(_CUTS), True, draw(st.integers(0, 9)), False)
    return Answer(bytes(out), status, unquote(quote(text)), payload)


def _ours(wire: bytes, cuts: list[int]) -> GrpcReply | None:
    session = ClientSession()
    session.start(grpc_unary_request(AUTHORITY, PATH, REQUEST, 5.0))
    points = sorted({cut % (len(wire) + 1) for cut in cuts})
    reply = None
    for a, b in zip([0, *points], [*points, len(wire)], strict=True):
        reply = session.feed(wire[a:b]) or reply
    return reply


def _oracle(wire: bytes) -> GrpcReply | None:
    """What ``h2`` reads from ``wire``, as the gRPC call's outcome (None: not ended)."""
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="latin-1")
    )
    connection.initiate_connection()
    connection.increment_flow_control_window(1 << 20)
    connection.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", PATH),
                                (":authority", AUTHORITY), ("content-type", "application/grpc"),
                                ("te", "trailers")])  # fmt: skip
    connection.send_data(1, struct.pack(">BI", 0, len(REQUEST)) + REQUEST, end_stream=True)
    headers: dict[str, str] = {}
    trailers: dict[str, str] = {}
    data = bytearray()
    ended = False
    for event in connection.receive_data(wire):
        if isinstance(event, h2.events.ResponseReceived):
            headers = {str(name): str(value) for name, value in event.headers}
        elif isinstance(event, h2.events.TrailersReceived):
            trailers = {str(name): str(value) for name, value in event.headers}
        elif isinstance(event, h2.events.DataReceived):
            data += event.data
        elif isinstance(event, h2.events.StreamEnded):
            ended = True
    if not ended:
        return None
    fields = trailers or headers  # a trailers-only answer carries its status in the headers
    status = int(fields["grpc-status"])
    message = unquote(fields.get("grpc-message", ""), errors="replace")
    if status or not data:
        return GrpcReply(status, message, b"")
    assert struct.unpack_from(">BI", data) == (0, len(data) - 5)
    return GrpcReply(status, message, bytes(data[5:]))


def check_against_oracle(answer: Answer, cuts: list[int]) -> None:
    """Both readers agree with each other and with what the answer was built to mean."""
    expected = GrpcReply(answer.status, answer.message, answer.payload)
    assert _oracle(answer.wire) == expected
    try:
        ours = _ours(answer.wire, cuts)
    except OUR_ERRORS as error:
        raise AssertionError(f"ours refused a valid answer h2 reads: {error}") from error
    assert ours == expected


@EXAMPLES
@given(answers(), st.lists(st.integers(0, 100_000), max_size=6))
def test_every_valid_answer_reads_as_h2_reads_it_split_anywhere(
    answer: Answer, cuts: list[int]
) -> None:
    """Breaks if a header block across CONTINUATIONs, padding, priority, interleaved
    control or unknown frames, or DATA cut anywhere reads differently from ``h2``."""
    check_against_oracle(answer, cuts)


def test_a_rich_answer_split_at_every_byte_reads_the_same() -> None:
    """Breaks if any single split point of an answer using every feature loses a byte."""
    encoder = hpack.Encoder()
    head = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    trailers = encoder.encode([("grpc-status", "0"), ("grpc-message", "fine%20now")])
    body = struct.pack(">BI", 0, 40) + bytes(range(40))
    wire = (frame_bytes(SETTINGS, 0, 0) + frame_bytes(PING, 0, 0, b"12345678")
            + _frames_of_block(head, [2, 5], False, 3, True)
            + _data_frames(body, [3, 20], [0, 4], False)
            + _frames_of_block(trailers, [1, 4, 9], True, 0, False))  # fmt: skip
    expected = GrpcReply(0, "fine now", bytes(range(40)))
    assert _oracle(wire) == expected
    for cut in range(len(wire) + 1):
        assert _ours(wire, [cut]) == expected, cut


def _settings_then(*frames: bytes) -> bytes:
    return frame_bytes(SETTINGS, 0, 0) + b"".join(frames)


_HEAD = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
MALFORMED = {
    "a frame over the 16 KiB maximum": _settings_then(
        b"\x00\x40\x01" + bytes([DATA, 0]) + struct.pack(">I", 1) + b"x" * 16_385
    ),
    "padding as long as the frame": _settings_then(frame_bytes(HEADERS, PADDED | END_HEADERS, 1, b"\x05ab")),
    "a CONTINUATION that continues nothing": _settings_then(frame_bytes(CONTINUATION, END_HEADERS, 1, _HEAD)),
    "DATA where a CONTINUATION is due": _settings_then(
        frame_bytes(HEADERS, 0, 1, _HEAD[:2]), frame_bytes(DATA, 0, 1, b"abc")
    ),
    "DATA on stream 0": _settings_then(frame_bytes(DATA, 0, 0, b"abc")),
    "SETTINGS not a multiple of 6": frame_bytes(SETTINGS, 0, 0, b"\x00\x04\x00\x00\x00"),
    "a PING not of 8 bytes": _settings_then(frame_bytes(PING, 0, 0, b"1234")),
    "a WINDOW_UPDATE of 0": _settings_then(frame_bytes(WINDOW_UPDATE, 0, 0, b"\0\0\0\0")),
    "a PUSH_PROMISE though push is off": _settings_then(frame_bytes(5, END_HEADERS, 1, b"\0\0\0\x02" + _HEAD)),
    "an undecodable header block": _settings_then(frame_bytes(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff\xff\xff")),
    "HEADERS on stream 0": _settings_then(frame_bytes(HEADERS, END_HEADERS, 0, _HEAD)),
}  # fmt: skip


@pytest.mark.parametrize("wire", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_answer_is_refused_by_both_ours_with_our_error(wire: bytes) -> None:
    """Breaks if an answer ``h2`` refuses as a protocol error is read by ours, or ours
    fails it with anything but its own error."""
    with pytest.raises((h2.exceptions.ProtocolError, h2.exceptions.FrameDataMissingError,
                        h2.exceptions.FrameTooLargeError, hpack.HPACKError)):  # fmt: skip
        _oracle(wire)
    with pytest.raises(OUR_ERRORS):
        _ours(wire, [])


@EXAMPLES
@given(answers(), st.integers(0, 10_000), st.integers(0, 255), st.integers(0, 10_000))
def test_a_mangled_answer_is_read_or_refused_with_our_error_never_a_crash(
    answer: Answer, at: int, byte: int, cut_at: int
) -> None:
    """Breaks if a byte changed or the answer cut short makes ours raise anything but
    its own errors (an IndexError, a struct.error, a UnicodeDecodeError)."""
    wire = bytearray(answer.wire)
    wire[at % len(wire)] = byte
    for candidate in (bytes(wire), answer.wire[: cut_at % len(answer.wire)]):
        with suppress(OUR_ERRORS):
            _ours(candidate, [cut_at])


@contextmanager
def _planted(kind: int, replacement: Callable[..., object]) -> Iterator[None]:
    original = http2._HANDLERS[kind]
    http2._HANDLERS[kind] = replacement  # type: ignore[assignment]
    try:
        yield
    finally:
        http2._HANDLERS[kind] = original


def _dropping_middle_fragments(
    session: ClientSession, flags: int, stream: int, payload: bytes
) -> GrpcReply | None:
    """The slip: a CONTINUATION that does not end the block is not appended."""
    if not flags & END_HEADERS:
        return None
    return ClientSession._continuation(session, flags, stream, payload)


def _off_by_one_padding(
    session: ClientSession, flags: int, stream: int, payload: bytes
) -> GrpcReply | None:
    """The slip: a padded DATA frame keeps one byte of its padding."""
    if flags & PADDED:
        pad = payload[0]
        payload = bytes([max(pad - 1, 0)]) + payload[1:]
    return ClientSession._data(session, flags, stream, payload)


@pytest.mark.parametrize(
    ("kind", "slip"), [(CONTINUATION, _dropping_middle_fragments), (DATA, _off_by_one_padding)],
    ids=["a CONTINUATION fragment dropped", "DATA padding off by one"],
)  # fmt: skip
def test_a_planted_bug_turns_the_differential_red(kind: int, slip: Callable[..., object]) -> None:
    """Breaks if the differential cannot tell a broken reader from a working one."""

    @settings(EXAMPLES, phases=[Phase.generate], report_multiple_bugs=False)
    @given(answers(), st.lists(st.integers(0, 100_000), max_size=6))
    def differential(answer: Answer, cuts: list[int]) -> None:
        check_against_oracle(answer, cuts)

    with _planted(kind, slip), pytest.raises(AssertionError):
        differential()
