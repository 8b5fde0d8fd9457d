"""One asyncio face over KServe v2 HTTP (lean HTTP/1.1) and gRPC (``tritonclient``'s aio channel).

The canary and the sweep speak to a server through
:class:`~tritonwatch.probe.interfaces.InferenceClient`, so the protocol is a constructor
argument and error handling is written once: :func:`classify_error` maps every way a
call can fail to an :class:`Outcome`.
Triton-only APIs (model config) answer None on servers that lack them, which is
how the canary also works against any KServe v2 / Open Inference Protocol server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.kserve import GRPC_MODEL_INFER, model_path
from tritonwatch.probe.binary_tensors import binary_request_body
from tritonwatch.probe.canary.encoded_requests import EncodedRequests
from tritonwatch.probe.canary.engine_channels import EngineCrashedError
from tritonwatch.probe.canary.engine_http import ConnectionPool, encode_request
from tritonwatch.probe.canary.engine_tls import TlsSettings
from tritonwatch.probe.canary.library_path import (
    ClientFaultError,
    LibraryCall,
    grpc_library_call,
    http_library_call,
)
from tritonwatch.probe.encoded import grpc_infer_request
from tritonwatch.probe.infer_response import (
    InferResponse,
    ResponseDecodeError,
    decode_grpc_infer_response,
    decode_http_infer_response,
    decompressed,
    http_status_error,
)
from tritonwatch.probe.interfaces import InferenceClient, ServerErrorLike
from tritonwatch.probe.json_tensors import json_request_body
from tritonwatch.probe.payload import Tensor
from tritonwatch.probe.server_errors import ServerError, as_server_error
from tritonwatch.records.observations import Outcome
from tritonwatch.wire.http2 import MAX_REQUEST_DATA, GrpcReply, UnaryRequest, grpc_unary_request
from tritonwatch.wire.kserve_protobuf import Scalar
from tritonwatch.wire.limits import AnswerLimits, AnswerTooLargeError

_UNSUPPORTED_HTTP = {"404", "400", "501"}
_UNSUPPORTED_GRPC = ("UNIMPLEMENTED", "NOT_FOUND")
ACCEPT_ENCODING = "gzip, deflate"
"""What the HTTP client's metadata requests offer to read: exactly the encodings its own
decoder inflates (never ``br``, which aiohttp offered when brotli was installed). Infer
requests offer nothing, as perf_analyzer's do not: Triton gzips an answer whenever the
request allows it, which costs the server CPU on every canary request and the canary's
engine a zlib inflater per answer (a large share of its CPU on an answer once the
header was read from the last one's layout), for answers of a few hundred bytes. An
answer that comes compressed anyway (a proxy) is still read (:func:`decompressed`)."""
HttpDecode = Callable[[bytes, str | None, str | None, float | None], InferResponse]
"""Reads a 200 infer answer (body, header length, encoding, when it came)."""
BINARY_TENSOR_EXTENSION = "binary_tensor_data"
"""The name ``GET /v2`` lists when the server reads and writes binary tensors."""


_GRPC_STATUS_OUTCOMES = {
    "DEADLINE_EXCEEDED": Outcome.TIMEOUT,
    "UNAVAILABLE": Outcome.CONNECTION_ERROR,
}


def _classify_server_error(error: ServerErrorLike, protocol: str) -> Outcome:
    status = str(error.status() or "")
    if protocol == "grpc":
        code = status.removeprefix("StatusCode.")
        return _GRPC_STATUS_OUTCOMES.get(code, Outcome.GRPC_ERROR)
    # tritonclient.http reports undecodable bodies with a status too; no status at
    # all means the client could not make sense of a reply.
    return Outcome.HTTP_ERROR if status else Outcome.BAD_RESPONSE


def classify_error(error: BaseException, protocol: str) -> Outcome:
    """The outcome label for a failed call (docs/design.md §12: what each client raises):
    our HTTP client's :class:`ServerError` and ``tritonclient``'s
    ``InferenceServerException`` (gRPC) alike. An answer over ``canary.limits`` is
    ``too_large``; one our reader failed on and a library read is ``client_error``
    (probe/canary/library_path.py)."""
    server = as_server_error(error)
    if server is not None:
        return _classify_server_error(server, protocol)
    for kind, outcome in _ERROR_OUTCOMES:
        if isinstance(error, kind):
            return outcome
    return _classify_aiohttp_error(error)


_ERROR_OUTCOMES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], Outcome], ...]
_ERROR_OUTCOMES = (
    (AnswerTooLargeError, Outcome.TOO_LARGE),
    ((ClientFaultError, EngineCrashedError), Outcome.CLIENT_ERROR),
    (ResponseDecodeError, Outcome.BAD_RESPONSE),
    ((TimeoutError, asyncio.TimeoutError), Outcome.TIMEOUT),
    ((ConnectionError, OSError), Outcome.CONNECTION_ERROR),
)
"""The first that matches, in order (a timeout is an OSError too)."""


def _classify_aiohttp_error(error: BaseException) -> Outcome:
    aiohttp = _aiohttp()
    if aiohttp is not None and isinstance(error, aiohttp.ClientConnectionError):
        return Outcome.CONNECTION_ERROR
    if aiohttp is not None and isinstance(error, aiohttp.ClientResponseError):
        return Outcome.HTTP_ERROR
    return Outcome.BAD_RESPONSE


def _aiohttp() -> Any:
    """aiohttp, when something in this process loaded it (the simulator, a test's fake
    server), else None: the canary's own clients no longer use it, so without it none
    of its errors can exist, and the daemon does not pay for importing it."""
    return sys.modules.get("aiohttp")


def http_status(error: BaseException) -> int | None:
    """The HTTP status of an HTTP call's failure, when the server answered one."""
    server = as_server_error(error)
    if server is not None:
        status = str(server.status() or "")
        return int(status) if status.isdigit() else None
    aiohttp = _aiohttp()
    if aiohttp is not None and isinstance(error, aiohttp.ClientResponseError):
        return int(error.status)
    return None


def is_refused_connection(error: BaseException) -> bool:
    """True when nothing listened at the address (the readiness probe and the circuit
    breaker already say so); every other failure is worth a log line of its own."""
    server = as_server_error(error)
    if server is not None:
        text = str(server.message() or "")
        return "UNAVAILABLE" in str(server.status() or "") and "onnection refused" in text
    seen: set[int] = set()
    current: BaseException | None = error
    aiohttp = _aiohttp()
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        if aiohttp is not None and isinstance(current, aiohttp.ClientConnectorError):
            current = current.os_error
        else:
            current = current.__cause__ or current.__context__
    return False


def error_text(error: BaseException, *, timeout: float | None = None, limit: int = 300) -> str:
    """What went wrong, in words, never empty (``str(TimeoutError())`` is); ``timeout``
    is the deadline a bare timeout ran into."""
    text = str(error).strip()
    if isinstance(error, TimeoutError | asyncio.TimeoutError) and not text:
        within = f" within {timeout:g} s" if timeout is not None else ""
        text = f"no answer{within} (canary timeout)"
    return (text or type(error).__name__)[:limit]


def is_unsupported(error: ServerErrorLike, protocol: str) -> bool:
    """True when the server does not implement the API (not when it failed)."""
    status = str(error.status() or "")
    if protocol == "grpc":
        return any(code in status for code in _UNSUPPORTED_GRPC)
    return status in _UNSUPPORTED_HTTP


def _address(url: str) -> str:
    return url.partition("://")[2].rstrip("/")


class HttpInferenceClient:
    """KServe v2 over HTTP/1.1 on lean keep-alive connections (one pool per target).

    Every call is bytes built once (:mod:`~tritonwatch.probe.canary.engine_http`: aiohttp's
    per-request machinery was most of the canary's gap to perf_analyzer over HTTP).
    Requests carry binary tensors (:mod:`~tritonwatch.probe.binary_tensors`) or plain JSON ones
    (:func:`json_request_body`), as the canary chose from :meth:`extensions`. Answers
    arrive exactly as sent and are inflated and decoded once by
    :mod:`~tritonwatch.probe.infer_response`, whose errors name the fault. A non-200
    answer raises :class:`ServerError` with the status, as ``tritonclient.http`` raises
    its ``InferenceServerException``, so errors are classified the same way.
    """

    protocol = "http"

    def __init__(self, url: str, connections: int = 64, tls: ClientTLS | None = None) -> None:
        secure = tls_for(url, tls)
        self._ssl = secure.ssl_context() if secure is not None else None
        self._host = _address(url)
        self._origin = f"{'https' if secure else 'http'}://{self._host}"
        self._root = f"{self._origin}/v2"
        self._connections = connections
        self._extensions: frozenset[str] | None = None
        self._requests: EncodedRequests[bytes] = EncodedRequests()
        self._pool_: ConnectionPool | None = None

    def _pool(self) -> ConnectionPool:
        """Made on first use, inside the event loop that will run it."""
        if self._pool_ is None:
            parts = urlsplit(self._root)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            self._pool_ = ConnectionPool(
                parts.hostname or "127.0.0.1", port, self._ssl, self._connections
            )
        return self._pool_

    def _model_url(self, model: str, version: str) -> str:
        return self._origin + model_path(model, version)

    async def _get_json(self, url: str) -> dict[str, Any]:
        request = encode_request(
            "GET", self._host, urlsplit(url).path, b"", {"Accept-Encoding": ACCEPT_ENCODING}
        )
        status, headers, body = await self._pool().exchange(request)
        encoding = headers.get("content-encoding")
        if status != 200:
            raise _status_error(status, body, encoding)
        body = decompressed(body, encoding)
        try:
            result = json.loads(body)
        except (ValueError, RecursionError) as error:
            raise ResponseDecodeError(f"{url} answered no JSON: {error}") from None
        if not isinstance(result, dict):
            raise ResponseDecodeError(f"expected a JSON object, got {type(result).__name__}")
        return result

    async def extensions(self) -> frozenset[str]:
        """The ``extensions`` that ``GET /v2`` lists, asked once per client (per target).

        Raises:
            ServerError, ResponseDecodeError, OSError, TimeoutError: when the server
            metadata cannot be read; nothing is cached then.
        """
        if self._extensions is None:
            listed = (await self._get_json(self._root)).get("extensions", [])
            if not isinstance(listed, list):
                raise ResponseDecodeError(f"GET /v2: 'extensions' is {type(listed).__name__}")
            self._extensions = frozenset(str(name) for name in listed)
        return self._extensions

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return await self._get_json(self._model_url(model, version))

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        try:
            return await self._get_json(self._model_url(model, version) + "/config")
        except ServerError as error:
            if is_unsupported(error, self.protocol):
                return None
            raise

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        """One infer; the answer carries ``received_at``, the loop's time when its last
        byte was in (decoding, which is our CPU and no part of the latency, comes after)."""
        request = self.infer_request(model, version, tensors, binary=binary)
        return await self.infer_bytes(request, timeout=timeout)

    async def infer_bytes(self, request: bytes, *, timeout: float) -> Any:
        """As :meth:`infer`, for a whole request already encoded (:meth:`encode_infer`)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):  # not wait_for: see ModelCanary.prepare
            status, headers, payload = await self._pool().exchange(request)
        return http_infer_answer(status, headers, payload, loop.time())

    def infer_request(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool
    ) -> bytes:
        """The whole HTTP/1.1 infer request for these tensors, encoded once and reused
        while they stay the same objects (the canary's engine sends these bytes too)."""
        return self._requests.get(
            (model, version, binary),
            tensors,
            lambda: self.encode_infer(model, version, tensors, binary=binary),
        )

    def close_idle_connections(self) -> None:
        """Lets go of idle keep-alive connections: once its canaries send from the
        engine, the pool only serves the odd metadata GET, and a connection kept open
        for that would be one more on the server per target for nothing."""
        if self._pool_ is not None:
            self._pool_.close_idle()

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) of a plain-HTTP server; None over TLS, which only the event
        loop's connections speak."""
        if self._ssl is not None:
            return None
        parts = urlsplit(self._root)
        return parts.hostname or "127.0.0.1", parts.port or 80

    @property
    def engine_endpoint(self) -> tuple[str, int, TlsSettings | None]:
        """(host, port, TLS) for the canary's engine: TLS None in clear, else this
        client's own context, the URL's host the name its certificate must carry."""
        parts = urlsplit(self._root)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if self._ssl is not None else 80)
        return host, port, None if self._ssl is None else TlsSettings(self._ssl, host)

    def library_call(self, request: bytes, limits: AnswerLimits) -> LibraryCall:
        """``request`` (:meth:`infer_request`'s bytes) sent through ``urllib3`` and read
        by ``tritonclient.http`` (probe/canary/library_path.py), over this client's TLS."""
        host, port, _ = self.engine_endpoint
        return http_library_call(host, port, self._ssl, request, limits)

    def encode_infer(
        self,
        model: str,
        version: str,
        tensors: Sequence[Tensor],
        *,
        binary: bool,
        parameters: Mapping[str, Scalar] | None = None,
    ) -> bytes:
        """The whole HTTP/1.1 infer request, with the request ``parameters`` given."""
        encode = binary_request_body if binary else json_request_body
        body, headers = encode(tensors, parameters)
        path = model_path(model, version) + "/infer"
        return encode_request("POST", self._host, path, body, headers)

    async def close(self) -> None:
        if self._pool_ is not None:
            self._pool_.close()


def http_infer_answer(
    status: int,
    headers: Mapping[str, str],
    payload: bytes,
    received: float,
    decode: HttpDecode = decode_http_infer_response,
) -> Any:
    """An infer answer as it arrived (status, the kept headers, the body as sent) made
    into the decoded result, stamped ``received_at``; a non-200 status raises
    :class:`ServerError` as ``tritonclient.http`` raises its exception. ``decode``: a
    canary's own :meth:`HttpAnswerDecoder.decode`, which reads its repeated answers
    faster."""
    encoding = headers.get("content-encoding")
    if status != 200:
        raise _status_error(status, payload, encoding)
    return decode(payload, headers.get("inference-header-content-length"), encoding, received)


def _status_error(status: int, body: bytes, encoding: str | None) -> ServerError:
    """A non-200 answer as ``tritonclient`` raises it; a compressed error body is read
    inflated when it can be (Triton sends errors plain)."""
    with contextlib.suppress(ResponseDecodeError, AnswerTooLargeError):
        body = decompressed(body, encoding)
    return http_status_error(status, body)


class GrpcInferenceClient:
    """A target's gRPC canary client: the engine's calls (:meth:`engine_request`) and the
    model's metadata and config over the target's HTTP API (``api``) import neither
    ``grpc`` nor ``tritonclient.grpc``; ``tritonclient.grpc.aio`` (its channel, TLS and
    options; the deadline travels as gRPC's own) is made on first use, for TLS targets,
    requests too large for the engine and a gRPC-only target's metadata and config."""

    protocol = "grpc"

    def __init__(
        self, url: str, tls: ClientTLS | None = None, api: HttpInferenceClient | None = None
    ) -> None:
        """``api``: the target's HTTP API, asked for metadata and config (this client
        owns and closes it); None (a gRPC-only target): those go over gRPC."""
        secure = tls_for(url, tls)
        self._options = secure.tritonclient_grpc_options() if secure is not None else {}
        self._authority = _address(url)
        self._secure = secure is not None
        self._tls = secure
        self._api = api
        self._aio_: _AioGrpc | None = None
        self._requests: EncodedRequests[bytes] = EncodedRequests()

    def _aio(self) -> _AioGrpc:
        """``tritonclient.grpc.aio``'s client, made on first use (inside the loop that
        runs it: grpc.aio binds its channel to the running loop)."""
        if self._aio_ is None:
            self._aio_ = _AioGrpc(self._authority, self._options)
        return self._aio_

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) of a plaintext gRPC server; None over TLS, which only
        ``grpc.aio`` speaks."""
        if self._secure:
            return None
        parts = urlsplit(f"//{self._authority}")
        return parts.hostname or "127.0.0.1", parts.port or 80

    @property
    def engine_endpoint(self) -> tuple[str, int, TlsSettings | None]:
        """(host, port, TLS) for the canary's engine: TLS None in clear, else the
        target's settings with ALPN ``h2`` (as gRPC's TLS offers), the host its name."""
        parts = urlsplit(f"//{self._authority}")
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if self._tls is not None else 80)
        if self._tls is None:
            return host, port, None
        return host, port, TlsSettings(self._tls.ssl_context(("h2",)), host)

    def engine_request(
        self, model: str, version: str, tensors: Sequence[Tensor], *, timeout: float
    ) -> UnaryRequest | None:
        """The ``ModelInfer`` call the canary's engine sends over its own HTTP/2 (the
        message this client sends, its deadline in ``grpc-timeout``); None when the
        message is too large for a fresh connection's window (``grpc.aio`` sends it)."""
        return self.unary_request(self.message(model, version, tensors), timeout)

    def message(self, model: str, version: str, tensors: Sequence[Tensor]) -> bytes:
        """The serialized ``ModelInferRequest`` of these tensors, made once while they stay."""
        return self._requests.get(
            (model, version, False), tensors, lambda: grpc_infer_request(model, version, tensors)
        )

    def unary_request(self, message: bytes, timeout: float) -> UnaryRequest | None:
        """``message`` as the engine's ``ModelInfer`` call; None when too large for it."""
        if len(message) + 5 > MAX_REQUEST_DATA:
            return None
        return grpc_unary_request(self._authority, GRPC_MODEL_INFER, message, timeout)

    def library_call(self, message: bytes, limits: AnswerLimits) -> LibraryCall:
        """``message`` (the ``ModelInfer`` the engine sends) on a ``grpcio`` channel of its
        own, read by ``tritonclient`` (probe/canary/library_path.py)."""
        return grpc_library_call(self._authority, self._tls, message, limits)

    async def extensions(self) -> frozenset[str]:
        """``ServerMetadata``'s extensions (the gRPC canary needs none of them)."""
        if self._api is not None:
            return await self._api.extensions()
        result: dict[str, Any] = await self._aio().client.get_server_metadata(as_json=True)
        return frozenset(str(name) for name in result.get("extensions", []))

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        if self._api is not None:
            return await self._api.metadata(model, version)
        aio = self._aio()
        result: dict[str, Any] = await aio.client.get_model_metadata(model, version, as_json=True)
        return normalise_grpc_json(result)

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        """The model's config; the HTTP API's connection is let go after it (the
        canary asks metadata, then config, once a preparation)."""
        if self._api is not None:
            try:
                return await self._api.config(model, version)
            finally:
                self._api.close_idle_connections()
        aio = self._aio()
        try:
            result: dict[str, Any] = await aio.client.get_model_config(model, version, as_json=True)
        except aio.server_error as error:
            if is_unsupported(error, self.protocol):
                return None
            raise
        return normalise_grpc_json(result.get("config", result))

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        """One ``ModelInfer`` of the request serialized once, on ``tritonclient``'s
        channel; the answer's bytes are stamped ``received_at`` before they are decoded.
        Failures are ``InferenceServerException`` s, exactly as ``tritonclient`` raises."""
        return await self.infer_message(self.message(model, version, tensors), timeout=timeout)

    async def infer_message(self, request: bytes, *, timeout: float) -> Any:
        """As :meth:`infer`, for a ``ModelInferRequest`` already serialized."""
        aio = self._aio()
        loop = asyncio.get_running_loop()
        try:
            payload = await aio.infer_call()(request, timeout=timeout)
        except aio.grpc.RpcError as error:
            raise aio.error(error) from None
        received = loop.time()
        return decode_grpc_infer_response(payload, received)

    async def close(self) -> None:
        if self._aio_ is not None:
            await self._aio_.client.close()
        if self._api is not None:
            await self._api.close()


class _AioGrpc:
    """``tritonclient.grpc.aio``'s client and what the canary uses of ``grpc`` with it."""

    def __init__(self, authority: str, options: Mapping[str, Any]) -> None:
        import grpc  # noqa: PLC0415 - heavy; load on use
        import tritonclient.grpc.aio as grpcclient  # noqa: PLC0415
        from tritonclient.grpc._utils import get_error_grpc  # noqa: PLC0415
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        self.grpc: Any = grpc
        self.error: Callable[[Any], BaseException] = get_error_grpc
        self.server_error: Any = InferenceServerException
        self.client: Any = grpcclient.InferenceServerClient(authority, **options)
        self._call: Any = None

    def infer_call(self) -> Any:
        """``ModelInfer`` on ``tritonclient``'s channel (its TLS and options, one HTTP/2
        connection per target), bytes in and bytes out: no per-request protobuf
        building, no ``InferResult`` wrapping."""
        if self._call is None:
            channel = self.client._channel  # its connection, options and TLS
            self._call = channel.unary_unary(
                GRPC_MODEL_INFER,
                request_serializer=None,
                response_deserializer=None,
            )
        return self._call


def grpc_infer_answer(reply: GrpcReply, received: float) -> Any:
    """A gRPC call the canary's engine finished made into the decoded result, stamped
    ``received_at``; a non-OK status raises :class:`ServerError` with the face
    ``tritonclient``'s ``get_error_grpc`` gives a ``grpc.RpcError`` (status
    ``StatusCode.NAME``, the server's message), so it is classified and logged alike."""
    if reply.status != 0:
        raise ServerError(reply.message, status=reply.status_name)
    return decode_grpc_infer_response(reply.payload, received)


def normalise_grpc_json(message: Mapping[str, Any]) -> dict[str, Any]:
    """gRPC's JSON form leaves defaults out and prints int64 as strings (camelCase, too,
    from some printers); the HTTP form is what the rest of the code reads. The one
    conversion, shared with the scrapers, is
    :func:`tritonwatch.common.grpc_json.grpc_json_as_http`."""
    from tritonwatch.common.grpc_json import grpc_json_as_http  # noqa: PLC0415 - imports tritonclient.grpc

    return grpc_json_as_http(message)


def client_for(
    protocol: str,
    http_url: str,
    grpc_url: str,
    tls: ClientTLS | None = None,
    *,
    grpc_only: bool = False,
) -> InferenceClient:
    """The client for ``protocol`` pointed at the matching endpoint of a target. A gRPC
    client asks metadata and config over the target's HTTP API at ``http_url`` unless
    the target is ``grpc_only`` (configured by its gRPC URL, no ``http_url``: the rule
    :func:`~tritonwatch.scrape.model_apis.model_apis_for` follows), which keeps the
    daemon of a gRPC canary free of ``grpc`` and ``tritonclient.grpc``."""
    if protocol == "grpc":
        api = None if grpc_only else HttpInferenceClient(http_url, connections=1, tls=tls)
        return GrpcInferenceClient(grpc_url, tls, api)
    return HttpInferenceClient(http_url, tls=tls)


def sync_client(protocol: str, url: str, tls: ClientTLS | None = None) -> Any:
    """A blocking ``tritonclient`` client for ``protocol`` at ``url`` (a scheme and
    ``host:port``), with TLS when the scheme is secure: the sweep's setup and statistics
    and ``tune``'s repository calls all start here."""
    address = _address(url)
    secure = tls_for(url, tls)
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient  # noqa: PLC0415 - heavy; load on use

        options = secure.tritonclient_grpc_options() if secure is not None else {}
        return grpcclient.InferenceServerClient(address, **options)
    import tritonclient.http as httpclient  # noqa: PLC0415

    options = secure.tritonclient_http_options() if secure is not None else {}
    return httpclient.InferenceServerClient(address, **options)
