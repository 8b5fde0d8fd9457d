"""The server-sent-events reader: events as the servers frame them, however the reads fall."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonwatch.wire.sse import DONE, SseError, SseEvent, SseParser

# Triton generate_stream (A1), then an OpenAI stream's last chunks (A4): with CRLF line
# ends, a comment (keep-alive), an ``event:`` field, a two-line data field and non-ASCII.
STREAM = (
    b'data: {"model_name":"ensemble","text_output":"If I had"}\n\n'
    b": keep-alive\r\n"
    b"event: message\r\n"
    b'data: {"choices":[],\r\n'
    b'data: "usage":{"completion_tokens":2}}\r\n\r\n'
    b'data: {"text":"caf\xc3\xa9"}\n\n'
    b"data: [DONE]\n\n"
)
EVENTS = [
    '{"model_name":"ensemble","text_output":"If I had"}',
    '{"choices":[],\n"usage":{"completion_tokens":2}}',
    '{"text":"café"}',
    DONE,
]


def _event_ends(stream: bytes) -> list[int]:
    """Where each event ends: the LF of the blank line after its data lines."""
    ends, position, has_data = [], 0, False
    while (lf := stream.find(b"\n", position)) >= 0:
        line = stream[position:lf].removesuffix(b"\r")
        if not line and has_data:
            ends.append(lf)
        has_data = (has_data or line.startswith(b"data")) and bool(line)
        position = lf + 1
    return ends


def _feed_in_reads(stream: bytes, cuts: list[int]) -> list[SseEvent]:
    """Feeds ``stream`` split at ``cuts``; read number n is stamped float(n)."""
    parser = SseParser()
    points = sorted({0, len(stream), *cuts})
    events = []
    for stamp, (start, end) in enumerate(itertools.pairwise(points)):
        events += parser.feed(stream[start:end], float(stamp))
    assert not parser.pending
    return events


def test_one_read_gives_every_event_it_completes_with_its_stamp() -> None:
    """Breaks if events in one read are lost, merged, or stamped with anything but that
    read's stamp, or if CRLF framing, comments, other fields or the data join change."""
    assert SseParser().feed(STREAM, 7.5) == [SseEvent(data, 7.5) for data in EVENTS]
    assert _event_ends(STREAM)[-1] == len(STREAM) - 1


def test_every_split_point_gives_the_same_events_stamped_by_the_completing_read() -> None:
    """Breaks if an event split across two reads (at any byte, inside a CRLF or a UTF-8
    character included) is lost, garbled, or stamped by the read that began it."""
    ends = _event_ends(STREAM)
    for cut in range(1, len(STREAM)):
        events = _feed_in_reads(STREAM, [cut])
        assert [e.data for e in events] == EVENTS, cut
        assert [e.stamp for e in events] == [0.0 if end < cut else 1.0 for end in ends], cut


def test_data_fields_follow_the_event_stream_rules() -> None:
    """Breaks if one space after the colon stops being dropped (and only one), a bare
    ``data`` line stops counting as empty data, or ``data:`` with no value dispatches
    nothing instead of an empty event."""
    parser = SseParser()
    assert parser.feed(b"data:x\n\ndata:  two spaces\n\ndata\ndata: y\n\ndata:\n\n", 1.0) == [
        SseEvent("x", 1.0),
        SseEvent(" two spaces", 1.0),
        SseEvent("\ny", 1.0),
        SseEvent("", 1.0),
    ]


def test_events_without_data_and_comments_dispatch_nothing() -> None:
    """Breaks if a comment, a blank line on its own, or an event of ``id``/``event``/
    ``retry`` fields alone is handed on as an event."""
    parser = SseParser()
    assert parser.feed(b": ping\n\n\n\nid: 4\nevent: x\nretry: 10\n\n", 1.0) == []
    assert parser.feed(b"data: 1\n\n", 2.0) == [SseEvent("1", 2.0)]


def test_a_byte_order_mark_is_skipped_at_the_start_only() -> None:
    """Breaks if a leading BOM hides the first field, or one later is dropped from data."""
    parser = SseParser()
    assert parser.feed(b"\xef\xbb\xbfdata: a\n\ndata: \xef\xbb\xbfb\n\n", 0.0) == [
        SseEvent("a", 0.0),
        SseEvent("\ufeffb", 0.0),
    ]


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    """Breaks if a garbled event raises inside the reader instead of reaching its decoder."""
    assert SseParser().feed(b"data: \xff{\n\n", 0.0) == [SseEvent("\ufffd{", 0.0)]


def test_pending_tells_an_unfinished_event() -> None:
    """Breaks if a stream cut inside an event (a partial line, or data lines without the
    blank line) is not told apart from one that ended between events."""
    parser = SseParser()
    assert not parser.pending
    parser.feed(b"data: a", 0.0)
    assert parser.pending
    parser.feed(b"\n", 1.0)
    assert parser.pending
    assert parser.feed(b"\n", 2.0) == [SseEvent("a", 2.0)]
    assert not parser.pending


def test_an_event_over_the_bound_is_refused() -> None:
    """Breaks if an event that never ends is buffered without bound, or one at the
    bound is refused."""
    parser = SseParser(max_event_bytes=16)
    assert parser.feed(b"data: " + b"x" * 10 + b"\n", 0.0) == []
    assert parser.feed(b"\n", 0.0) == [SseEvent("x" * 10, 0.0)]
    with pytest.raises(SseError, match="longer than 16 bytes"):
        parser.feed(b"data: " + b"x" * 20, 1.0)
    many_lines = SseParser(max_event_bytes=16)
    with pytest.raises(SseError, match="longer than 16 bytes"):
        many_lines.feed(b"data: 1234567890\ndata: 1234567890\n", 0.0)


_line_end = st.sampled_from([b"\n", b"\r\n"])
_value = st.text(st.characters(blacklist_characters="\r\n", codec="utf-8"), max_size=12)
_noise = st.sampled_from([b": comment", b"event: x", b"id: 3", b"retry: 5", b":"])


@st.composite
def _streams(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """An event stream with random data lines, line ends and noise lines, and its events."""
    stream, events = b"", []
    for _ in range(draw(st.integers(0, 5))):
        lines = draw(st.lists(_value, min_size=1, max_size=3))
        for line in lines:
            if draw(st.booleans()):
                stream += draw(_noise) + draw(_line_end)
            stream += b"data: " + line.encode() + draw(_line_end)
        stream += draw(_line_end)
        events.append("\n".join(lines))
    return stream, events


@settings(max_examples=200, deadline=None)
@given(_streams(), st.lists(st.integers(0, 400), max_size=8))
def test_any_stream_split_anywhere_reads_the_same(
    stream: tuple[bytes, list[str]], cuts: list[int]
) -> None:
    """Breaks if some mix of line ends, noise lines and read boundaries loses, merges or
    garbles an event, or stamps it by any read but the one holding its last byte."""
    raw, expected = stream
    cuts = [min(cut, len(raw)) for cut in cuts]
    events = _feed_in_reads(raw, cuts)
    assert [e.data for e in events] == expected
    points = sorted({0, len(raw), *cuts})
    reads = list(itertools.pairwise(points))
    completing = [
        float(next(n for n, (start, end) in enumerate(reads) if start <= last < end))
        for last in _event_ends(raw)
    ]
    assert [e.stamp for e in events] == completing
