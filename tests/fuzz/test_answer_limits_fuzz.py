"""Property test: the HTTP/1.1 reader's answer limit holds to the byte, however the
answer is framed (Content-Length or chunked) and split across reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonwatch.wire.http1 import Http1Connection
from tritonwatch.wire.limits import AnswerLimits, AnswerTooLargeError


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, position = bytearray(), 0
    for size in sizes:
        piece = body[position : position + size]
        if not piece:
            break
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
        position += len(piece)
    if position < len(body):
        out += b"%x\r\n" % (len(body) - position) + body[position:] + b"\r\n"
    return bytes(out) + b"0\r\n\r\n"


def _feed_all(parser: Http1Connection, pieces: list[bytes]) -> None:
    for piece in pieces:
        parser.feed(piece)


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=3000),
    st.integers(-3, 3),
    st.booleans(),
    st.lists(st.integers(1, 700), max_size=8),
    st.lists(st.integers(1, 900), min_size=1, max_size=12),
)
def test_the_answer_limit_holds_to_the_byte_however_framed_and_split(
    body: bytes, offset: int, chunked: bool, chunk_sizes: list[int], splits: list[int]
) -> None:
    """Breaks if an answer of exactly the limit is refused, one byte more is let
    through, or the answer read within the limit is not the body sent."""
    limit = max(0, len(body) + offset)
    if chunked:
        answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(
            body, chunk_sizes
        )
    else:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    parser = Http1Connection(AnswerLimits(max_answer_bytes=limit))
    pieces, position = [], 0
    for size in splits:
        pieces.append(answer[position : position + size])
        position += size
    pieces.append(answer[position:])
    if len(body) > limit:
        with pytest.raises(AnswerTooLargeError):
            _feed_all(parser, pieces)
        return
    results = [parser.feed(piece) for piece in pieces]
    done = [result for result in results if result is not None]
    assert done == [(200, body)]
