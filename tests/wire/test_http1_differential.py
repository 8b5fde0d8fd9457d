"""wire/http1.py held to ``h11``, the library it replaces, on the same server bytes.

Hypothesis builds random but valid HTTP/1.1 answers — any status a KServe server
answers with, a reason phrase or none, header fields in any case and order, a
Content-Length body or a chunked one (sizes in either hex case, with or without leading
zeros and extensions, trailers or none) — two of them back to back on one keep-alive
connection, and feeds the bytes split at random points to our ``Http1Connection`` and
to an ``h11`` client connection that sent the two requests. Both must read the same
statuses and bodies, and ours the second answer from what the first left over. Malformed
answers (framing broken) must be refused by both, ours with its own error. The
planted-bug tests break the decoder the way a slip would and require the differential
to go red.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

import h11
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tritonwatch.wire import http1
from tritonwatch.wire.http1 import AnswerTooLargeError, Http1Connection, HttpProtocolError

EXAMPLES = settings(max_examples=150, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
"""Fixed examples, so the suite is the same on every run and host."""
OUR_ERRORS = (HttpProtocolError, AnswerTooLargeError)
Answer = tuple[bytes, int, bytes]
"""An answer's bytes, its status and its body."""

_TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-", min_size=1,
                 max_size=12)  # fmt: skip
_FIELD_VALUE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
_FRAMING = {"content-length", "transfer-encoding", "connection"}


@st.composite
def _chunked(draw: st.DrawFn, body: bytes) -> bytes:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=5))))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    out = bytearray()
    for piece in pieces:
        if not piece:
            continue  # a zero size ends the body
        size = f"{len(piece):x}"
        size = size.upper() if draw(st.booleans()) else size
        size = "0" * draw(st.integers(0, 2)) + size
        extension = ";name=value" if draw(st.booleans()) else ""
        out += f"{size}{extension}\r\n".encode() + piece + b"\r\n"
    out += b"0\r\n"
    for name, value in draw(st.lists(st.tuples(_TOKEN, _FIELD_VALUE), max_size=2)):
        out += f"x-{name}: {value}\r\n".encode()
    return bytes(out + b"\r\n")


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    status = draw(st.sampled_from([200, 200, 400, 404, 429, 500, 503]))
    reason = draw(st.sampled_from(["", " OK", " Bad Request", " Whatever it says"]))
    body = draw(st.binary(max_size=2000))
    fields = [(f"x-{name}", value) for name, value in draw(st.lists(st.tuples(_TOKEN, _FIELD_VALUE),
                                                                    max_size=4))]  # fmt: skip
    chunked = draw(st.booleans())
    framing = ("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(len(body)))
    name = draw(st.sampled_from([framing[0], framing[0].lower(), framing[0].upper()]))
    fields.insert(draw(st.integers(0, len(fields))), (name, framing[1]))
    head = f"HTTP/1.1 {status}{reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n"
    wire = head.encode() + (draw(_chunked(body)) if chunked else body)
    return wire, status, body


def _ours(wire: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    """What our connection reads from ``wire`` fed in pieces: every answer it completes."""
    connection = Http1Connection()
    points = sorted({cut % (len(wire) + 1) for cut in cuts})
    out = []
    for a, b in zip([0, *points], [*points, len(wire)], strict=True):
        answer = connection.feed(wire[a:b])
        while answer is not None:  # a read that completes one answer may hold the next
            out.append(answer)
            answer = connection.feed(b"")
    return out


def _oracle(wire: bytes, answers: int) -> list[tuple[int, bytes]]:
    """What ``h11`` reads from ``wire`` after sending ``answers`` requests, one at a time."""
    connection = h11.Connection(h11.CLIENT)
    out = []
    connection.receive_data(wire)
    for _ in range(answers):
        connection.send(h11.Request(method="POST", target="/v2/models/m/infer",
                                    headers=[("Host", "127.0.0.1"), ("Content-Length", "0")]))  # fmt: skip
        connection.send(h11.EndOfMessage())
        status, body = 0, bytearray()
        while True:
            event = connection.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif event is h11.NEED_DATA:
                return out
        out.append((status, bytes(body)))
        connection.start_next_cycle()
    return out


def check_against_oracle(first: Answer, second: Answer, cuts: list[int]) -> None:
    wire = first[0] + second[0]
    expected = [first[1:], second[1:]]
    assert _oracle(wire, 2) == expected
    try:
        ours = _ours(wire, cuts)
    except OUR_ERRORS as error:
        raise AssertionError(f"ours refused valid answers h11 reads: {error}") from error
    assert ours == expected


@EXAMPLES
@given(answers(), answers(), st.lists(st.integers(0, 10_000), max_size=6))
def test_two_answers_on_one_connection_read_as_h11_reads_them_split_anywhere(
    first: Answer, second: Answer, cuts: list[int]
) -> None:
    """Breaks if a body, a chunked body's sizes, extensions or trailers, or the second
    answer after the first's leftover bytes read differently from ``h11``."""
    check_against_oracle(first, second, cuts)


def test_a_chunked_answer_split_at_every_byte_reads_the_same() -> None:
    """Breaks if any single split point (inside the head, a size line, an extension,
    data, a CRLF, a trailer) loses or repeats a byte."""
    wire = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"
            b"3;x=y\r\nabc\r\n00A\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n"
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\n\r\nnone")  # fmt: skip
    expected = [(200, b"abc0123456789"), (404, b"none")]
    assert _oracle(wire, 2) == expected
    for cut in range(len(wire) + 1):
        assert _ours(wire, [cut]) == expected, cut


MALFORMED = {
    "a status of two digits": b"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
    "a status of four digits": b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    "a status line that is not HTTP": b"HTTX/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "a Content-Length that is not a number": b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    "a negative Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    "a chunk size that is not hex": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "an empty chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
    "a chunk without its CRLF": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n",
}  # fmt: skip


@pytest.mark.parametrize("wire", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_answer_is_refused_by_both_ours_with_our_error(wire: bytes) -> None:
    """Breaks if an answer ``h11`` refuses is read by ours, or ours fails it with
    anything but its own error."""
    with pytest.raises(h11.RemoteProtocolError):
        _oracle(wire + b"0\r\n\r\n", 1)
    with pytest.raises(OUR_ERRORS):
        _ours(wire + b"0\r\n\r\n", [])


@EXAMPLES
@given(answers(), st.integers(0, 10_000), st.integers(0, 255), st.integers(0, 10_000))
def test_a_mangled_answer_is_read_or_refused_with_our_error_never_a_crash(
    answer: Answer, at: int, byte: int, cut_at: int
) -> None:
    """Breaks if a byte changed or the answer cut short makes ours raise anything but
    its own errors (a ValueError from int(), an IndexError)."""
    wire = bytearray(answer[0])
    wire[at % len(wire)] = byte
    for candidate in (bytes(wire), answer[0][: cut_at % len(answer[0])]):
        with suppress(OUR_ERRORS):
            _ours(candidate, [cut_at])


def _size_off_by_one(line: bytes) -> int:
    """The slip: a chunk's size read one short."""
    return max(_true_size(line) - 1, 0)


def _extension_kept(line: bytes) -> int:
    """The slip: the size read from the whole line, its extension included."""
    digits = line.strip()
    if digits.strip(b"0123456789abcdefABCDEF"):
        raise HttpProtocolError(f"bad chunk size line: {line[:40]!r}")
    return int(digits, 16)


_true_size = http1._chunk_size


@pytest.mark.parametrize("slip", [_size_off_by_one, _extension_kept],
                         ids=["a chunk length off by one", "an extension read as the size"])  # fmt: skip
def test_a_planted_bug_turns_the_differential_red(
    slip: Callable[[bytes], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if the differential cannot tell a broken decoder from a working one."""

    @settings(EXAMPLES, phases=[Phase.generate], report_multiple_bugs=False)
    @given(answers(), answers(), st.lists(st.integers(0, 10_000), max_size=6))
    def differential(first: Answer, second: Answer, cuts: list[int]) -> None:
        check_against_oracle(first, second, cuts)

    monkeypatch.setattr(http1, "_chunk_size", slip)
    with pytest.raises(AssertionError):
        differential()
