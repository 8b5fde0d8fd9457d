"""Server-sent events read from a stream's body as it arrives (pure: no I/O).

Triton's ``generate_stream`` and the OpenAI-compatible servers (vLLM, trtllm-serve,
Triton's OpenAI frontend) frame every response as ``data: <json>`` and a blank line
(docs/plans/issue18.md A1, A4). The streaming canary times each response by when the read
that completed its event arrived, so :meth:`SseParser.feed` takes the read's stamp and
gives it to every event that read completes: an event split across reads is stamped by
the last of them, several events in one read share its stamp.

What is read follows the HTML standard's event-stream rules where these servers use
them: lines end in LF or CRLF (a lone CR, which none of them sends, is not a line end),
a blank line ends an event, ``data`` fields are joined with LF, a line starting with
``:`` is a comment, other fields (``event``, ``id``, ``retry``) are ignored, one space
after the colon is dropped, a leading byte-order mark is skipped, and an event with no
``data`` field is not dispatched. Text is UTF-8; bytes that are not become U+FFFD, as
the standard says, so a garbled event is handed on for its decoder to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

DONE = "[DONE]"
"""The last event's data on OpenAI-compatible streams (Triton's generate_stream has none:
its stream ends with the chunked body)."""

MAX_EVENT_BYTES = 1 << 20
"""The most one unfinished event may hold: a peer that never sends the blank line is
refused instead of buffered without end."""

_BOM = b"\xef\xbb\xbf"


class SseError(ValueError):
    """The stream cannot be read as server-sent events (an event over its bound)."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its data fields joined with LF, and the stamp of the read
    that completed it."""

    data: str
    stamp: float


class SseParser:
    """Splits one event stream into events; feed it every read of the body, in order."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max_event_bytes = max_event_bytes
        self._line = bytearray()
        self._data: list[str] = []
        self._held = 0
        self._first_line = True

    @property
    def pending(self) -> bool:
        """Bytes of an event that has not ended: a stream that stops here lost it."""
        return bool(self._line or self._data)

    def feed(self, data: bytes, stamp: float) -> list[SseEvent]:
        """The events ``data`` completes, each stamped ``stamp``.

        Raises:
            SseError: the unfinished event grew over ``max_event_bytes``.
        """
        self._line += data
        events: list[SseEvent] = []
        start = 0
        while (end := self._line.find(b"\n", start)) >= 0:
            line = bytes(self._line[start : end - 1 if self._line[end - 1 : end] == b"\r" else end])
            start = end + 1
            self._read_line(line, stamp, events)
        del self._line[:start]
        if self._held + len(self._line) > self._max_event_bytes:
            raise SseError(f"an event longer than {self._max_event_bytes} bytes")
        return events

    def _read_line(self, line: bytes, stamp: float, events: list[SseEvent]) -> None:
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            if self._data:
                events.append(SseEvent("\n".join(self._data), stamp))
            self._data, self._held = [], 0
            return
        name, _, value = line.partition(b":")
        if name != b"data":  # a comment (no name), or a field this reader has no use for
            return
        value = value.removeprefix(b" ")
        self._data.append(value.decode("utf-8", errors="replace"))
        self._held += len(value)
