"""Triton's gRPC ``ModelStreamInfer`` streams read on the canary engine's thread.

The event loop's gRPC stream (:class:`~tritonwatch.sweep.grpc_stream.GrpcStreamSession`)
keeps one long-lived call and routes every response through ``grpc.aio``'s completion
queue, a reader task and a queue, stamped when the loop got round to it. Here each
stream is its own call on the engine's kept h2c connection
(:mod:`~tritonwatch.wire.http2`): HEADERS and the one request message, half-closed, in
one write (no round trip more than the long-lived call's write: HTTP/2 opens a stream
with its first frame), then each response message as its DATA arrives, with the read's
kernel stamp, through ``codec.decode`` into the :class:`StreamClock`; the trailers end
the call (``triton_enable_empty_final_response`` makes the final response come first).
The connection carries the next stream once they came, as for a unary call.

Outcomes as on the event loop: the server's in-band error the clock reads, a non-OK
``grpc-status`` a server error (``StatusCode.NAME``, as ``tritonclient`` says it), a
reset, GOAWAY or broken connection a connection error, ``stream.timeout`` a timeout;
the pieces read before a failure count. TLS targets stay on the event loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from tritonwatch.common.kserve import GRPC_MODEL_STREAM_INFER
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.kserve.stream_request import GrpcStreamCodec, Piece
from tritonwatch.probe.canary.engine_stream import StreamAnswer, StreamRequests, StreamWire
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.wire.http2 import MAX_REQUEST_DATA, ClientSession, UnaryRequest
from tritonwatch.wire.http2 import grpc_unary_request as grpc_call


class GrpcStreamRequests(StreamRequests):
    """``ModelStreamInfer`` calls of one request each, read by :class:`GrpcStreamWire`."""

    def __init__(
        self,
        authority: str,
        codec: GrpcStreamCodec,
        sample: Callable[[], tuple[str, int]],
        timeout: float,
    ) -> None:
        """``authority``: ``host:port``; ``timeout``: the stream's, sent as
        ``grpc-timeout`` so the server gives up when the canary does."""
        self._authority, self._codec, self._sample = authority, codec, sample
        self._timeout = timeout
        self._ids = itertools.count(1)

    def fits(self, prompt: str, max_tokens: int) -> bool:
        """Whether a request of ``prompt`` fits one flow-control window (larger ones
        would wait on the server's window updates, which the engine does not)."""
        message = self._codec.encode(prompt, max_tokens, "tw-0000000000")
        return len(message) + 5 <= MAX_REQUEST_DATA

    def request(self) -> UnaryRequest:
        """The next stream's call (its own request id, as on the long-lived call)."""
        prompt, max_tokens = self._sample()
        message = self._codec.encode(prompt, max_tokens, f"tw-{next(self._ids)}")
        return grpc_call(self._authority, GRPC_MODEL_STREAM_INFER, message, self._timeout)

    def decode(self, payload: bytes) -> Piece:
        """One response message's bytes as the codec reads them (no ``tritonclient``)."""
        return self._codec.decode(self._codec.parse(payload))

    def new_wire(self) -> GrpcStreamWire:
        return GrpcStreamWire(self)


class GrpcStreamWire(StreamWire):
    """One h2c connection's streams, one call at a time (the engine's
    :class:`~tritonwatch.probe.canary.engine_wires.Wire`)."""

    def __init__(self, requests: GrpcStreamRequests) -> None:
        self._requests = requests
        self._session = ClientSession()
        self._clock = StreamClock(0.0)
        self._call: UnaryRequest | None = None
        self._broken = False

    def start(self) -> bytes:
        self._clock = StreamClock(0.0)
        self._call = self._requests.request()
        return self._session.start(self._call, streaming=True)

    def feed(self, data: bytes, received: float) -> StreamAnswer | None:
        """Reads one read of the call; its answer once the trailers came or it failed
        (never raises: a broken frame, a reset or an undecodable response is the
        stream's outcome, and the connection is not used again)."""
        try:
            try:
                reply = self._session.feed(data)
            finally:  # the responses before a reset or a broken frame in this read count
                for payload in self._session.take_messages():
                    self._clock.piece(received, self._requests.decode(payload))
        except Exception as error:  # as on the event loop: every failure is an outcome
            self._broken = True
            return StreamAnswer(self._clock, None, error)
        if reply is None:
            return None
        if reply.status != 0:
            return StreamAnswer(self._clock, None, ServerError(reply.message, reply.status_name))
        return StreamAnswer(self._clock, None, None)  # the final response ends it

    def take_output(self) -> bytes:
        return self._session.take_output()

    def reusable(self) -> bool:
        call = self._call
        return not self._broken and call is not None and self._session.can_send(call)

    def idle_data(self, data: bytes) -> bool:
        """As a unary call's connection: control frames leave it usable, a GOAWAY or a
        broken frame does not."""
        try:
            self._session.feed(data)
        except Exception:
            return False
        return not self._session.going_away
