"""The engine's HTTP/1.1 wire: an answer that repeats the last one's head is read without
the parser, and whatever does not repeat it is parsed as before."""

from __future__ import annotations

import pytest

from tritonwatch.probe.canary.engine_http1 import HeadedConnection
from tritonwatch.probe.canary.engine_wires import Http1Wire
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.limits import HttpRequest

REQUEST = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"


def _answer(body: bytes, status: bytes = b"200 OK", *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 " + status, b"Content-Type: application/octet-stream",
            b"Inference-Header-Content-Length: 2", *extra,
            b"Content-Length: " + str(len(body)).encode()]  # fmt: skip
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _parsed(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """What a fresh parser makes of ``data``: the reference the wire must agree with."""
    parser = HeadedConnection()
    parsed = parser.feed(data)
    assert parsed is not None
    return parsed[0], parser.headers, parsed[1]


def _read(wire: Http1Wire, *reads: bytes) -> tuple[int, dict[str, str], bytes]:
    assert wire.start() == REQUEST
    for data in reads[:-1]:
        assert wire.feed(data, 1.0) is None
    answer = wire.feed(reads[-1], 2.0)
    assert isinstance(answer, tuple)
    status, headers, body, received = answer
    assert received == 2.0
    return status, dict(headers), body


def test_a_repeated_head_gives_this_answers_body_as_the_parser_does() -> None:
    """Breaks if an answer read without the parser keeps the last answer's body or differs
    from what the parser makes of the same bytes."""
    wire = Http1Wire(HttpRequest(REQUEST))
    first, second = _answer(b"{}abcd"), _answer(b"{}wxyz")
    assert _read(wire, first) == _parsed(first)
    assert _read(wire, second) == _parsed(second)
    assert _read(wire, second)[2] == b"{}wxyz"


@pytest.mark.parametrize(
    "other",
    [
        _answer(b"{}abcd", b"500 Ab"),  # same length, another status
        _answer(b"{}abcd", b"200 OK", b"Connection: close"),  # another header
        _answer(b"{}abcdef"),  # another length
    ],
    ids=["status", "header", "length"],
)
def test_an_answer_that_does_not_repeat_the_head_is_parsed(other: bytes) -> None:
    """Breaks if an answer whose head or length changed is read with the last one's
    status, headers or length (a 500 read as a 200, a Connection: close missed)."""
    wire = Http1Wire(HttpRequest(REQUEST))
    _read(wire, _answer(b"{}abcd"))
    assert _read(wire, other) == _parsed(other)
    assert wire.reusable() == (b"Connection: close" not in other)


def test_an_answer_in_pieces_after_a_repeat_is_parsed_whole() -> None:
    """Breaks if the first read of an answer split across reads is taken for a whole
    answer, or a split answer is not read at all."""
    wire = Http1Wire(HttpRequest(REQUEST))
    answer = _answer(b"{}abcd")
    _read(wire, answer)
    _read(wire, answer)
    assert _read(wire, answer[:10], answer[10:]) == _parsed(answer)
    body_starts = answer.index(b"\r\n\r\n") + 4  # the whole head, part of the body
    assert _read(wire, answer[: body_starts + 1], answer[body_starts + 1 :]) == _parsed(answer)
    assert _read(wire, answer) == _parsed(answer)


def test_a_garbled_answer_of_the_same_length_still_fails() -> None:
    """Breaks if bytes of the right length that do not begin with the remembered head are
    accepted instead of refused by the parser."""
    wire = Http1Wire(HttpRequest(REQUEST))
    answer = _answer(b"{}abcd")
    _read(wire, answer)
    wire.start()
    with pytest.raises(HttpProtocolError):
        wire.feed(b"HTTX" + answer[4:], 1.0)


def test_a_chunked_answer_is_never_taken_for_a_repeat() -> None:
    """Breaks if a chunked answer's bytes are remembered as a head and a length: the next
    answer of that length would be read without its chunk framing taken off."""
    wire = Http1Wire(HttpRequest(REQUEST))
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{}abcd\r\n0\r\n\r\n"
    assert _read(wire, chunked) == _parsed(chunked)
    assert _read(wire, chunked) == (200, {}, b"{}abcd")
