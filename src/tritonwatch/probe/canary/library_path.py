"""The library path: a canary's requests sent through libraries instead of our own wire
code — to tell our bug from the server's, and for what the engine cannot send.

The canary reads answers with code of its own (HTTP/1.1 in
:mod:`~tritonwatch.wire.http1`, HTTP/2 in :mod:`~tritonwatch.wire.http2`,
protobuf in :mod:`~tritonwatch.wire.kserve_protobuf`, the KServe v2 decoder in
:mod:`~tritonwatch.kserve.infer_response`), for speed. Billing a bug of that code to
the server would page the Triton on-call for it. So an answer that one of them could
not read (:func:`doubted`) is asked for again through libraries that share none of
that code:

* HTTP: ``urllib3`` (the connection layer of ``requests``, its parser the standard
  library's ``http.client``), the body inflated by ``zlib`` within the same limit and
  decoded by ``tritonclient.http.InferResult``;
* gRPC: a ``grpcio`` channel of its own, the answer parsed by ``tritonclient``'s
  generated ``ModelInferResponse`` and read by ``tritonclient.grpc.InferResult``.

If the library reads it, the fault was ours: the outcome is ``client_error`` (left out
of the availability SLO), one ``canary_client_error`` line names our error and the
first line of the bytes, and the canary's requests go through the library from then on
(until it is rebuilt), so a bug of ours costs one outcome, not a page per request. If
the library cannot read it either, it is the server's (``bad_response``), and that
verdict stands for :data:`VERDICT_SECONDS`: a server that keeps sending broken answers
is not sent every request twice.

The library path is also the one way a request goes that the engine cannot send: a
gRPC message over a fresh HTTP/2 connection's flow-control window (64 KiB: the
engine's HTTP/2 sends no more than the initial window). Its requests leave from the
canary's event loop on the same open-loop schedule (:meth:`LibraryPath.serve`), each
in a worker thread (the libraries block). Every size stays bounded as on the engine:
a body over ``max_answer_bytes`` is not read (``grpcio``'s own
``max_receive_message_length`` is set to it), and an answer that was too large is
never asked for again (:class:`AnswerTooLargeError` is no doubt).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.common.kserve import GRPC_MODEL_INFER
from tritonwatch.common.logs import get_logger
from tritonwatch.kserve.infer_response import (
    ResponseDecodeError,
    check_outputs,
    decompressed,
    http_status_error,
)
from tritonwatch.wire.http1 import HttpProtocolError
from tritonwatch.wire.limits import AnswerLimits, AnswerTooLargeError

_log = get_logger("canary")
LibraryCall = Callable[[float], Any]
"""One infer through the library (its timeout in seconds): a result with ``as_numpy``,
or the exception the failure is classified by."""
ANSWER_START_BYTES = 120
"""How much of an answer we could not read is logged: its first line, at most this."""
BINARY_START_BYTES = 32
"""…or, for bytes that are no text, this many."""


class ClientFaultError(Exception):
    """Our reader failed on an answer a library read: the outcome ``client_error``."""

    def __init__(self, error: BaseException, answer_start: str) -> None:
        super().__init__(
            f"our reader could not read an answer the library read: "
            f"{type(error).__name__}: {str(error)[:200]}"
        )
        self.error = error
        self.answer_start = answer_start


def doubted(error: BaseException) -> bool:
    """Whether ``error`` may be a bug of ours: one of our readers refused the bytes
    (an HTTP/1.1 or HTTP/2 protocol error, an undecodable answer). Not a status the
    server sent, a timeout, a closed connection, nor an answer over its bound."""
    if isinstance(error, AnswerTooLargeError):
        return False
    return isinstance(error, HttpProtocolError | ResponseDecodeError)


def answer_start(data: bytes | None) -> str:
    """The first line of ``data`` (at most :data:`ANSWER_START_BYTES`), every byte that
    is not printable ASCII escaped: what a log line may carry of bytes from a server.
    Bytes that do not start as text (a protobuf message, an HTTP/2 frame) have no lines:
    their first :data:`BINARY_START_BYTES` are given instead."""
    if not data:
        return ""
    start = bytes(data[:ANSWER_START_BYTES])
    text = 0x20 <= start[0] < 0x7F
    start = start.split(b"\n", 1)[0] if text else start[:BINARY_START_BYTES]
    return repr(start)[2:-1]


def http_library_call(
    host: str,
    port: int,
    context: ssl.SSLContext | None,
    request: bytes,
    limits: AnswerLimits,
) -> LibraryCall:
    """The HTTP infer ``request`` (our own bytes, whole) sent with ``urllib3``, over
    ``context`` when given, its answer read within ``limits``."""
    import urllib3  # noqa: PLC0415 - requests' own dependency, loaded on use

    head, _, body = request.partition(b"\r\n\r\n")
    method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    skip = {"host", "connection", "content-length"}
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() not in skip:
            headers[name.strip()] = value.strip()
    asked = _Request(method, path, body, headers)
    pool: urllib3.HTTPConnectionPool
    if context is not None:
        pool = urllib3.HTTPSConnectionPool(host, port, maxsize=1, ssl_context=context)
    else:
        pool = urllib3.HTTPConnectionPool(host, port, maxsize=1)

    def call(timeout: float) -> Any:
        status, answer_headers, payload = _http_exchange(pool, asked, timeout, limits)
        encoding = answer_headers.get("content-encoding")
        if status != 200:
            with contextlib.suppress(ResponseDecodeError, AnswerTooLargeError):
                payload = decompressed(payload, encoding, limits.max_answer_bytes)
            raise http_status_error(status, payload)
        payload = decompressed(payload, encoding, limits.max_answer_bytes)
        header_length = answer_headers.get("inference-header-content-length")
        from tritonclient.http import InferResult  # noqa: PLC0415 - heavy; load on use

        try:
            return InferResult.from_response_body(
                payload, header_length=int(header_length) if header_length else None
            )
        except Exception as error:  # whatever the library's reading raised
            raise ResponseDecodeError(f"the library could not read it either: {error}") from None

    return call


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]


def _http_exchange(
    pool: Any, request: _Request, timeout: float, limits: AnswerLimits
) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body as sent) of one request; urllib3's errors as
    the ones the canary classifies (TimeoutError, ConnectionError, ResponseDecodeError)."""
    from urllib3.exceptions import (  # noqa: PLC0415
        HTTPError,
        NewConnectionError,
        ProtocolError,
    )
    from urllib3.exceptions import TimeoutError as Urllib3Timeout  # noqa: PLC0415

    try:
        response = pool.urlopen(
            request.method,
            request.path,
            body=request.body,
            headers=request.headers,
            retries=False,
            timeout=timeout,
            preload_content=False,
            decode_content=False,
            redirect=False,
        )
        try:
            answer_headers = {name.lower(): value for name, value in response.headers.items()}
            declared = answer_headers.get("content-length", "")
            if declared.isdigit():
                limits.check_answer(int(declared), "a Content-Length")
            payload = response.read(limits.max_answer_bytes + 1, decode_content=False)
            limits.check_answer(len(payload), "an answer's body")
        except BaseException:
            response.close()  # never read the rest
            raise
        response.release_conn()
    except NewConnectionError as error:
        raise ConnectionError(f"the library could not connect: {error}") from None
    except Urllib3Timeout as error:
        raise TimeoutError(f"the library's request timed out: {error}") from None
    except ProtocolError as error:
        cause = error.args[1] if len(error.args) > 1 else None
        if isinstance(cause, http.client.HTTPException) and not isinstance(
            cause, http.client.RemoteDisconnected
        ):
            raise ResponseDecodeError(f"the library could not read it either: {cause!r}") from None
        raise ConnectionError(f"the library's connection failed: {error}") from None
    except HTTPError as error:
        raise ResponseDecodeError(f"the library could not read it either: {error}") from None
    return response.status, answer_headers, payload


def grpc_library_call(
    authority: str, tls: ClientTLS | None, message: bytes, limits: AnswerLimits
) -> LibraryCall:
    """The ``ModelInfer`` ``message`` (our own bytes) sent on a ``grpcio`` channel of its
    own (over ``tls`` when given), the answer parsed by ``tritonclient``'s generated
    message and read by ``tritonclient.grpc.InferResult``."""
    import grpc  # noqa: PLC0415 - heavy; load on use
    from tritonclient.grpc import InferResult, service_pb2  # noqa: PLC0415
    from tritonclient.grpc._utils import get_error_grpc  # noqa: PLC0415

    options = [
        ("grpc.max_receive_message_length", limits.max_answer_bytes),
        ("grpc.max_metadata_size", limits.max_header_bytes),
    ]
    if tls is not None:
        channel = grpc.secure_channel(authority, tls.grpc_credentials(), options)
    else:
        channel = grpc.insecure_channel(authority, options)
    infer = channel.unary_unary(
        GRPC_MODEL_INFER,
        request_serializer=None,
        response_deserializer=service_pb2.ModelInferResponse.FromString,
    )

    def call(timeout: float) -> Any:
        try:
            reply = infer(message, timeout=timeout)
        except grpc.RpcError as error:
            code, details = error.code(), str(error.details() or "")
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
                raise AnswerTooLargeError(f"the library refused it too: {details}") from None
            if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
                text = f"the library could not read it either: {details}"
                raise ResponseDecodeError(text) from None
            raise get_error_grpc(error) from None
        return InferResult(reply)

    return call


VERDICT_SECONDS = 60.0
"""After the library, too, could not read an answer, doubted answers are the server's
without asking again for this long."""


class LibraryPath:
    """One model's canary's library path: its second opinions, and its requests when the
    library sends them (:attr:`active`)."""

    def __init__(
        self,
        fields: dict[str, str],
        make_call: Callable[[], LibraryCall],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``fields``: the log lines' target, model and protocol; ``make_call``: builds
        the library call of the canary's request (once, on first need)."""
        self._fields = fields
        self._make_call = make_call
        self._call: LibraryCall | None = None
        self._clock = clock
        self._server_until = 0.0
        """Until when doubted answers are the server's without a second opinion."""
        self.active = False
        """The canary's requests go through the library: the engine cannot send them,
        or the library read what we could not."""
        self.client_errors = 0

    def should_ask(self, error: BaseException) -> bool:
        """Whether ``error`` gets a second opinion: our reader refused the answer, the
        canary is still on its own readers, and no recent verdict says the server's."""
        return not self.active and doubted(error) and self._clock() >= self._server_until

    def call(self) -> LibraryCall:
        if self._call is None:
            self._call = self._make_call()
        return self._call

    async def infer(self, timeout: float) -> Any:
        """One request through the library (in a worker thread: its clients block)."""
        return await asyncio.to_thread(self.call(), timeout)

    async def second_opinion(
        self, error: BaseException, start: bytes, outputs: Sequence[str], timeout: float
    ) -> BaseException:
        """The outcome of an answer our reader refused with ``error``: a
        :class:`ClientFaultError` when the library reads the same request's answer (with every
        output in ``outputs``), else ``error`` itself (the server's)."""
        try:
            result = await self.infer(timeout)
            check_outputs(result, outputs)
        except asyncio.CancelledError:
            raise
        except Exception as library_error:  # any failure: it is not ours
            self._server_until = self._clock() + VERDICT_SECONDS
            _log.info(
                "canary_library_agrees",
                **self._fields,
                error=str(error)[:200],
                library_error=f"{type(library_error).__name__}: {str(library_error)[:200]}",
            )
            return error
        fault = ClientFaultError(error, answer_start(start or error_start(error)))
        self.client_errors += 1
        self.active = True
        _log.warning(
            "canary_client_error",
            **self._fields,
            error=f"{type(error).__name__}: {str(error)[:200]}",
            answer_start=fault.answer_start,
            now_on="library",
        )
        return fault


def error_start(error: BaseException) -> bytes:
    """The first bytes of the answer a reader kept on ``error`` (``answer_start``)."""
    start = getattr(error, "answer_start", b"")
    return start if isinstance(start, bytes) else b""


class LibraryCanary(Protocol):
    """What the library path asks of the canary it sends for (as the engine does)."""

    def next_gap(self) -> float: ...

    def may_send(self, intended: float) -> bool: ...

    def record(self, intended: float, answer: Any, woke: float) -> None: ...


async def serve(
    path: LibraryPath,
    canary: LibraryCanary,
    first_send: float,
    *,
    timeout: float,
    max_in_flight: int,
) -> None:
    """Sends ``canary``'s requests through ``path`` on its open-loop schedule from
    ``first_send`` (the running loop's clock) until cancelled: at most ``max_in_flight``
    at once, a request that waits for a slot waiting on its own clock, each timed out at
    its intended send time plus ``timeout``."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(max_in_flight)
    pending: set[asyncio.Task[None]] = set()
    next_send = first_send
    try:
        while True:
            following = next_send + canary.next_gap()
            await asyncio.sleep(max(0.0, next_send - loop.time()))
            woke = loop.time()
            if canary.may_send(next_send):
                request = _one(
                    path, canary=canary, intended=next_send, woke=woke, slots=slots, timeout=timeout
                )
                task = asyncio.create_task(request)
                pending.add(task)
                task.add_done_callback(pending.discard)
            # A loop far behind (a suspended process) skips ahead instead of a burst.
            next_send = max(following, loop.time() - timeout)
    finally:
        for task in list(pending):
            task.cancel()


async def _one(
    path: LibraryPath,
    *,
    canary: LibraryCanary,
    intended: float,
    woke: float,
    slots: asyncio.Semaphore,
    timeout: float,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = intended + timeout
    try:
        async with asyncio.timeout_at(deadline):
            async with slots:
                result = await path.infer(max(0.001, deadline - loop.time()))
    except asyncio.CancelledError:
        raise
    except Exception as error:  # every failure is an outcome, never a crash
        canary.record(intended, error, woke)
        return
    canary.record(intended, result, woke)
