"""gRPC load on the wire code's HTTP/2 client, in clear or over TLS: one call at a time
per connection.

Python's gRPC costs several times perf_analyzer's CPU per request and hands every
answer across threads, which cost the sweep gRPC throughput against perf_analyzer
(benchmarks/RESULTS.md, §8). This is the gRPC twin of the sweep's HTTP/1.1 path: the
call's frames built once (:func:`~tritonwatch.wire.http2.grpc_unary_request`), one
connection per client, answers read by :class:`~tritonwatch.wire.http2.ClientSession` on
the event loop; over TLS asyncio's transport encrypts, the context offering ALPN ``h2``.
A request over a fresh connection's 64 KiB window goes through ``grpc`` instead
(:mod:`~tritonwatch.sweep.grpc_callbacks`).
"""

from __future__ import annotations

import asyncio
import ssl

from tritonwatch.common.kserve import GRPC_MODEL_INFER
from tritonwatch.sweep.spec import LoadSpec
from tritonwatch.wire.http2 import (
    ClientSession,
    GrpcReply,
    Http2ClosedError,
    Http2Error,
    UnaryRequest,
    grpc_unary_request,
)


def h2_request(spec: LoadSpec) -> UnaryRequest | None:
    """The call's frames when ``spec`` is gRPC the wire code can send (its request fits a
    fresh connection's window), else None."""
    if spec.protocol != "grpc":
        return None
    try:
        return grpc_unary_request(
            f"{spec.host}:{spec.port}", GRPC_MODEL_INFER, spec.payload, spec.timeout
        )
    except ValueError:
        return None


class H2Connection(asyncio.Protocol):
    """One HTTP/2 connection; :meth:`call` sends a unary call and returns its reply."""

    def __init__(self) -> None:
        self._session = ClientSession()
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[GrpcReply] | None = None
        self._closed: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None = None) -> H2Connection:
        """Connects (through TLS when ``tls`` is given: ``host`` is the name checked).

        Raises:
            OSError: no connection (refused, unreachable, a failed TLS handshake).
        """
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(cls, host, port, ssl=tls)
        return protocol

    def can_call(self, request: UnaryRequest) -> bool:
        """Whether ``request`` may start here: open, no GOAWAY, stream ids and window left
        (else the caller opens a new connection: a spent one is no failed request)."""
        return self._closed is None and self._session.can_send(request)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("connection closed by the server"))

    def data_received(self, data: bytes) -> None:
        try:
            reply = self._session.feed(data)
        except (Http2Error, Http2ClosedError) as error:
            self._fail(error)
            return
        owed = self._session.take_output()
        if owed and self._transport is not None:
            self._transport.write(owed)  # SETTINGS/PING acks and window updates
        if reply is not None and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(reply)

    def _fail(self, error: BaseException) -> None:
        self._closed = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        if self._transport is not None:
            self._transport.abort()

    async def call(self, request: UnaryRequest) -> GrpcReply:
        """Sends ``request`` and waits for its reply.

        Raises:
            ConnectionError: the connection closed or went away (before or during the call).
            Http2Error: the server broke HTTP/2 or gRPC framing.
        """
        if self._closed is not None:
            raise self._closed
        assert self._transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(self._session.start(request))
        return await self._waiter

    def close(self) -> None:
        """Drops the connection at once: a graceful TLS shutdown would need the event
        loop for another round trip, and the loop stops right after a sweep's last close."""
        if self._transport is not None:
            self._transport.abort()
