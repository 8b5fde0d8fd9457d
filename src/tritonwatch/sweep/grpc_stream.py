"""One long-lived gRPC ``ModelStreamInfer`` call that carries a canary's every stream.

Triton's streaming RPC is bidirectional: many requests go up one call, and their
responses come back interleaved, told apart only by the request's ``id``
(docs/plans/issue18.md A2). Opening a call per request would put an HTTP/2 stream
set-up into every TTFT, which no user of a long-lived stream pays; so a canary keeps
one call open, writes each request with a fresh id (``tw-1``, ``tw-2``, …), and one
reader task hands each response to the request waiting for that id, stamped with the
loop's clock as it is read (grpc.aio gives no kernel stamps).

When the call breaks (the server restarts, a proxy drops it) every request in flight
fails as a connection error (:class:`StreamBrokenError`, an :class:`OSError`, which the
canary classifies as ``connection_error``) and the next request opens a new call,
after a backoff that doubles while opening keeps failing. Requests are sent as
bytes the codec serialized; nothing of ``tritonclient``'s stream wrapper is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.kserve import GRPC_MODEL_STREAM_INFER
from tritonwatch.wire.kserve_protobuf import decode_stream_infer_response

REOPEN_MIN_SECONDS = 0.1
REOPEN_MAX_SECONDS = 5.0
"""Backoff between attempts to open a broken call again: quick after one break, at most
a few seconds while the server stays away (the breaker spaces the canary's requests
meanwhile)."""
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 2**31 - 1)]


class StreamBrokenError(ConnectionError):
    """The call carrying a request ended before the request's stream did."""


class StreamMessageCodec(Protocol):
    """What the session needs of :class:`~tritonwatch.kserve.stream_request.GrpcStreamCodec`."""

    def encode(self, prompt: str, max_tokens: int, request_id: str) -> bytes: ...


Response = tuple[float, Any]
"""(monotonic time it was read, ``ModelStreamInferResponse``)."""


def open_channel(url: str, tls: ClientTLS | None) -> Any:
    """A ``grpc.aio`` channel to ``url`` (``grpc://``/``grpcs://`` host:port), secure with
    the target's TLS settings when the scheme says so (client_tls, as every client)."""
    import grpc  # noqa: PLC0415 - heavy; load on use

    address = url.partition("://")[2].rstrip("/") if "://" in url else url
    secure = tls_for(url, tls)
    if secure is not None:
        return grpc.aio.secure_channel(address, secure.grpc_credentials(), CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(address, CHANNEL_OPTIONS)


class GrpcStreamSession:
    """A canary's ``ModelStreamInfer`` call, opened on first use and after each break."""

    def __init__(
        self,
        channel: Any,
        codec: StreamMessageCodec,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._channel = channel
        self._codec = codec
        self._clock = clock
        self._open_call = channel.stream_stream(
            GRPC_MODEL_STREAM_INFER,
            request_serializer=None,  # the codec's bytes go as they are
            response_deserializer=decode_stream_infer_response,
        )
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[str, asyncio.Queue[Response | BaseException]] = {}
        self._sent = 0
        self._writing = asyncio.Lock()
        """grpc.aio allows one write in flight per call; a second one fails the call with
        GRPC_CALL_ERROR_TOO_MANY_OPERATIONS, so concurrent requests write in turn."""
        self._backoff = 0.0
        self._open_after = 0.0
        self.opened = 0
        """Calls opened so far: one, unless the call broke."""

    async def request(self, prompt: str, max_tokens: int) -> tuple[str, asyncio.Queue[Any]]:
        """Writes one request; returns its id and the queue its responses arrive on
        (``(stamp, message)``, or the exception that ended the call). Call
        :meth:`done` with the id once the stream is over for the caller.

        Raises:
            StreamBrokenError: the call could not be opened or written to.
        """
        call = await self._ensure_open()
        self._sent += 1
        request_id = f"tw-{self._sent}"
        responses: asyncio.Queue[Response | BaseException] = asyncio.Queue()
        self._waiting[request_id] = responses
        try:
            async with self._writing:
                await call.write(self._codec.encode(prompt, max_tokens, request_id))
        except asyncio.CancelledError:
            self.done(request_id)
            raise
        except Exception as error:  # AioRpcError, or the call already done
            self.done(request_id)
            self._broke(call, error)
            raise StreamBrokenError(f"ModelStreamInfer write failed: {_text(error)}") from None
        return request_id, responses

    def done(self, request_id: str) -> None:
        """Stops routing ``request_id``'s responses (late ones are dropped)."""
        self._waiting.pop(request_id, None)

    async def _ensure_open(self) -> Any:
        if self._call is not None and not self._call.done():
            return self._call
        wait = self._open_after - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)
        if self._call is not None and not self._call.done():  # another request opened it
            return self._call
        self._call = self._open_call()
        self.opened += 1
        self._reader = asyncio.create_task(self._read(self._call), name="grpc-stream-reader")
        return self._call

    async def _read(self, call: Any) -> None:
        """Routes every response of ``call`` to its request until the call ends."""
        try:
            async for message in call:
                stamp = self._clock()
                self._backoff = 0.0  # the server answers: reopen quickly next time
                responses = self._waiting.get(message.infer_response.id)
                if responses is not None:
                    responses.put_nowait((stamp, message))
            error: BaseException = StreamBrokenError("ModelStreamInfer ended by the server")
        except asyncio.CancelledError:
            error = StreamBrokenError("ModelStreamInfer closed")
            self._fail_waiting(error)
            raise
        except Exception as failure:  # grpc.aio.AioRpcError and the like
            error = StreamBrokenError(f"ModelStreamInfer broke: {_text(failure)}")
        self._broke(call, error)

    def _broke(self, call: Any, error: BaseException) -> None:
        """Fails the requests in flight and spaces the next opening."""
        if call is self._call:
            self._call = None
            self._backoff = min(max(self._backoff * 2, REOPEN_MIN_SECONDS), REOPEN_MAX_SECONDS)
            self._open_after = self._clock() + self._backoff
            call.cancel()
        self._fail_waiting(error)

    def _fail_waiting(self, error: BaseException) -> None:
        waiting, self._waiting = self._waiting, {}
        for responses in waiting.values():
            responses.put_nowait(error)

    async def close(self) -> None:
        """Cancels the call and its reader; requests in flight fail."""
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._fail_waiting(StreamBrokenError("ModelStreamInfer closed"))
        await self._channel.close()


def _text(error: BaseException) -> str:
    details = getattr(error, "details", None)
    if callable(details):
        with contextlib.suppress(Exception):
            return f"{error.code().name}: {details()}"[:300]  # type: ignore[attr-defined]
    return (str(error) or type(error).__name__)[:300]
