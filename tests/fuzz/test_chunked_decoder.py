"""The incremental chunked-body decoder of :mod:`tritonwatch.wire.http1`.

A ``generate_stream`` answer is one chunked body as long as the stream, so its events
must come out with the read that brought them, the end must be known exactly (a
keep-alive connection may carry the next request only then), and a peer that never ends
a line must be refused, not buffered. ``Http1Connection`` reads whole answers through
the same decoder (its tests are in test_infer_decoder_fuzz.py).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import fixtures_dir
from tritonwatch.wire.http1 import (
    MAX_CHUNK_LINE_BYTES,
    MAX_TRAILER_BYTES,
    ChunkedDecoder,
    HttpProtocolError,
    response_head,
)

RECORDED = (fixtures_dir() / "generate_stream" / "llm_stream_4_tokens.http").read_bytes()
"""A real Triton 2.51 generate_stream answer (see its .source.txt)."""
BODY = b"3;name=value\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n"


def _decode(pieces: list[bytes]) -> tuple[bytes, ChunkedDecoder]:
    decoder = ChunkedDecoder()
    return b"".join(decoder.feed(piece) for piece in pieces), decoder


def test_the_recorded_stream_decodes_to_its_events() -> None:
    """Breaks if a real generate_stream body is not decoded to its four SSE events, or
    the end is not seen at the terminal chunk."""
    head = response_head(RECORDED)
    assert head is not None
    assert (head.status, head.chunked) == (200, True)
    assert head.headers["content-type"] == "text/event-stream; charset=utf-8"
    body, decoder = _decode([RECORDED[head.length :]])
    assert decoder.done and decoder.leftover == b""
    tokens = [f'"text_output":"token{i}"' for i in range(4)]
    prefix = 'data: {"model_name":"llm_stream","model_version":"1",'
    assert body.decode() == "".join(f"{prefix}{token}}}\n\n" for token in tokens)


def test_every_split_point_decodes_the_same_and_ends_at_the_last_byte() -> None:
    """Breaks if a body split at any byte (inside a size line, data, a CRLF, the
    trailers) loses or repeats bytes, or reports the end before the last byte."""
    for cut in range(len(BODY) + 1):
        decoder = ChunkedDecoder()
        first = decoder.feed(BODY[:cut])
        assert decoder.done is (cut == len(BODY)), cut
        assert first + decoder.feed(BODY[cut:]) == b"abc0123456789", cut
        assert decoder.done and decoder.leftover == b"", cut


def test_chunk_data_is_handed_on_as_it_arrives() -> None:
    """Breaks if the decoder holds a partial chunk back until the chunk is whole (a
    stream's event would reach its reader late, stamped by a later read)."""
    decoder = ChunkedDecoder()
    assert decoder.feed(b"9\r\ndata") == b"data"
    assert decoder.feed(b": x\n\n") == b": x\n\n"
    assert decoder.feed(b"\r\n") == b""
    assert not decoder.done


def test_bytes_after_the_end_are_left_over() -> None:
    """Breaks if the next answer's bytes on a keep-alive connection are eaten as body."""
    body, decoder = _decode([b"1\r\nx\r\n0\r\n\r\nHTTP/1.1", b" 200 OK"])
    assert (body, decoder.done, decoder.leftover) == (b"x", True, b"HTTP/1.1 200 OK")
    assert decoder.feed(b"\r\n") == b""
    assert decoder.leftover == b"HTTP/1.1 200 OK\r\n"


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        ([b"zz\r\n"], "bad chunk size"),
        ([b"-1\r\n"], "bad chunk size"),
        ([b"\r\n"], "bad chunk size"),
        ([b"1" * 16 + b"\r\n"], "bad chunk size"),
        ([b"2\r\nabcd\r\n"], "chunk of 2 bytes is not followed by CRLF"),
        ([b"2\r\nab\r", b"x"], "chunk of 2 bytes is not followed by CRLF"),
        ([b"2\r\nab", b"\n\r"], "chunk of 2 bytes is not followed by CRLF"),
        ([b"1;" + b"e" * MAX_CHUNK_LINE_BYTES], "chunk size line longer than"),
        ([b"1;" + b"e" * MAX_CHUNK_LINE_BYTES + b"\r\n"], "chunk size line longer than"),
        ([b"0\r\n", b"X: " + b"v" * MAX_CHUNK_LINE_BYTES], "trailer field longer than"),
        ([b"0\r\n" + b"X: 1234567\r\n" * (MAX_TRAILER_BYTES // 12 + 1)], "trailer fields longer"),
    ],
)
def test_malformed_framing_is_refused_with_what_is_wrong(pieces: list[bytes], message: str) -> None:
    """Breaks if a bad size line, data without its CRLF, or an endless line is read on
    (or buffered) instead of refused with an error that says which."""
    with pytest.raises(HttpProtocolError, match=message):
        _decode(pieces)


def test_the_line_bound_holds_to_the_byte() -> None:
    """Breaks if a size line exactly at the bound is refused, in one read or split
    between its CR and LF."""
    line = b"1;" + b"e" * (MAX_CHUNK_LINE_BYTES - 2)
    assert _decode([line + b"\r\nx\r\n0\r\n\r\n"])[0] == b"x"
    body, decoder = _decode([line + b"\r", b"\nx\r\n0\r\n\r\n"])
    assert (body, decoder.done) == (b"x", True)


@st.composite
def _bodies(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A chunked encoding of a random body (random chunk sizes, extensions, trailers)."""
    body = draw(st.binary(max_size=300))
    sizes = draw(st.lists(st.integers(1, 64), max_size=12))
    encoded, position = b"", 0
    for size in [*sizes, len(body)]:
        piece = body[position : position + size]
        position += len(piece)
        if piece:
            extension = draw(st.sampled_from([b"", b";a=1", b" ;b"]))
            encoded += f"{len(piece):x}".encode() + extension + b"\r\n" + piece + b"\r\n"
    trailer = draw(st.sampled_from([b"", b"X-T: 1\r\n", b"A: 1\r\nB: \r\n"]))
    return encoded + b"0\r\n" + trailer + b"\r\n", body


@settings(max_examples=200, deadline=None)
@given(_bodies(), st.lists(st.integers(0, 700), max_size=10))
def test_any_body_split_anywhere_decodes_whole(
    encoded: tuple[bytes, bytes], cuts: list[int]
) -> None:
    """Breaks if some chunking and read boundaries lose, repeat or reorder body bytes,
    or the end is reported early or missed."""
    raw, body = encoded
    points = sorted({0, len(raw), *(min(c, len(raw)) for c in cuts)})
    decoder, decoded = ChunkedDecoder(), b""
    for start, end in itertools.pairwise(points):
        assert not decoder.done
        decoded += decoder.feed(raw[start:end])
    assert (decoded, decoder.done, decoder.leftover) == (body, True, b"")
