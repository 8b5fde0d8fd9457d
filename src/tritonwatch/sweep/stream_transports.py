"""The stream sweep's transports: a streamed request sent from the sweep's event loop.

The canary streams from its engine (probe/canary/engine_stream.py,
engine_stream_grpc.py); the stream sweep (sweep/stream_sweep.py) runs a closed
loop of concurrent streams on its own event loop, each stream a coroutine:

* :class:`HttpStream`: ``generate_stream`` or OpenAI, one POST on a keep-alive pool of
  lean HTTP/1.1 connections (:class:`~tritonwatch.sweep.http_stream_pool.ConnectionPool`),
  the SSE body read as it arrives, each read stamped;
* :class:`GrpcStream`: Triton's ``ModelStreamInfer``, requests up one long-lived call,
  responses by id (:class:`~tritonwatch.sweep.grpc_stream.GrpcStreamSession`).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.kserve.stream_request import (
    GenerateCodec,
    GrpcStreamCodec,
    OpenAICodec,
    StreamDecodeError,
)
from tritonwatch.probe.canary.engine_http1 import encode_request
from tritonwatch.probe.canary.engine_stream import STREAM_HEADERS, UNFINISHED_EVENT
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.sweep.grpc_stream import GrpcStreamSession, open_channel
from tritonwatch.sweep.http_stream_pool import ConnectionPool
from tritonwatch.wire.sse import SseParser


class StreamTransport(Protocol):
    """Sends one streamed request and feeds its pieces to ``clock`` as they arrive."""

    async def send(self, prompt: str, max_tokens: int, clock: StreamClock) -> float | None:
        """Returns when the stream ended (None: the pieces say); raises how it failed."""
        ...

    async def close(self) -> None: ...


class HttpStream:
    """``generate_stream`` or OpenAI streaming: one POST, an SSE body read as it arrives."""

    def __init__(
        self,
        url: str,
        ssl_context: ssl.SSLContext | None,
        limit: int,
        codec: GenerateCodec | OpenAICodec,
    ) -> None:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or "127.0.0.1"
        self._host = parts.netloc or f"{host}:{port}"
        self._prefix = parts.path.rstrip("/")
        self._pool = ConnectionPool(host, port, ssl_context, limit)
        self._codec = codec

    async def send(self, prompt: str, max_tokens: int, clock: StreamClock) -> float | None:
        codec = self._codec
        body = codec.encode(prompt, max_tokens)
        request = encode_request(
            "POST", self._host, self._prefix + codec.path, body, STREAM_HEADERS
        )
        parser = SseParser()
        end: float | None = None
        async with contextlib.aclosing(self._pool.stream(request)) as reads:
            async for data, stamp in reads:
                for event in parser.feed(data, stamp):
                    clock.piece(event.stamp, codec.decode(event.data))
                end = stamp
        if parser.pending:
            raise StreamDecodeError(UNFINISHED_EVENT)
        return end

    async def close(self) -> None:
        self._pool.close()


class GrpcStream:
    """Triton's ``ModelStreamInfer``: requests up one call, responses by id."""

    def __init__(self, session: Callable[[], GrpcStreamSession], codec: GrpcStreamCodec) -> None:
        """``session``: opens the call, on the first :meth:`send`."""
        self._open_session = session
        self._session_: GrpcStreamSession | None = None
        self._codec = codec

    def _session(self) -> GrpcStreamSession:
        if self._session_ is None:
            self._session_ = self._open_session()
        return self._session_

    async def send(self, prompt: str, max_tokens: int, clock: StreamClock) -> float | None:
        session = self._session()
        request_id, responses = await session.request(prompt, max_tokens)
        try:
            while not clock.done:
                item = await responses.get()
                if isinstance(item, BaseException):
                    raise item
                stamp, message = item
                clock.piece(stamp, self._codec.decode(message))
        finally:
            session.done(request_id)
        return None

    async def close(self) -> None:
        if self._session_ is not None:
            await self._session_.close()


def open_transport(
    url: str,
    tls: ClientTLS | None,
    limit: int,
    codec: GenerateCodec | OpenAICodec | GrpcStreamCodec,
) -> StreamTransport:
    """The transport for ``codec``: one ModelStreamInfer call for gRPC (opened on first
    use), else a keep-alive pool of at most ``limit`` HTTP/1.1 connections."""
    if isinstance(codec, GrpcStreamCodec):
        grpc_codec = codec

        def session() -> GrpcStreamSession:  # the event loop's call, on its first send
            return GrpcStreamSession(open_channel(url, tls), grpc_codec)

        return GrpcStream(session, codec)
    secure = tls_for(url, tls)
    context = secure.ssl_context() if secure is not None else None
    return HttpStream(url, context, limit, codec)
