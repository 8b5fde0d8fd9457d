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
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.kserve import GRPC_MODEL_INFER, model_path
from tritonwatch.kserve.binary_tensors import binary_request_body
from tritonwatch.kserve.encoded import grpc_infer_request
from tritonwatch.kserve.infer_response import (
    InferResponse,
    ResponseDecodeError,
    decode_grpc_infer_response,
    decode_http_infer_response,
    decompressed,
    http_status_error,
)
from tritonwatch.kserve.json_tensors import json_request_body
from tritonwatch.kserve.payload import Tensor
from tritonwatch.kserve.server_errors import ServerError, ServerErrorLike, as_server_error
from tritonwatch.probe.canary.encoded_requests import EncodedRequests
from tritonwatch.probe.canary.engine_channels import EngineCrashedError
from tritonwatch.probe.canary.engine_http1 import encode_request
from tritonwatch.probe.canary.engine_tls import TlsSettings
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.library_path import (
    ClientFaultError,
    LibraryCall,
    grpc_library_call,
    http_library_call,
)
from tritonwatch.probe.canary.model_api import CanaryModelApi
from tritonwatch.records.observations import Outcome
from tritonwatch.triton_api.endpoint import api_endpoint
from tritonwatch.wire.http2 import MAX_REQUEST_DATA, GrpcReply, UnaryRequest, grpc_unary_request
from tritonwatch.wire.kserve_protobuf import Scalar
from tritonwatch.wire.limits import AnswerLimits, AnswerTooLargeError, HttpRequest

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


def _address(url: str) -> str:
    return url.partition("://")[2].rstrip("/")


class HttpInferenceClient:
    """KServe v2 over HTTP/1.1 on lean keep-alive connections (one pool per target).

    Every call is bytes built once (:mod:`~tritonwatch.probe.canary.engine_http1`: aiohttp's
    per-request machinery was most of the canary's gap to perf_analyzer over HTTP).
    Requests carry binary tensors (:mod:`~tritonwatch.kserve.binary_tensors`) or plain JSON ones
    (:func:`json_request_body`), as the canary chose from :meth:`extensions`. Answers
    arrive exactly as sent and are inflated and decoded once by
    :mod:`~tritonwatch.kserve.infer_response`, whose errors name the fault. A non-200
    answer raises :class:`ServerError` with the status, as ``tritonclient.http`` raises
    its ``InferenceServerException``, so errors are classified the same way.
    """

    protocol = "http"

    def __init__(self, url: str, api: CanaryModelApi, tls: ClientTLS | None = None) -> None:
        """``api``: the target's model APIs (this client closes them)."""
        secure = tls_for(url, tls)
        self._ssl = secure.ssl_context() if secure is not None else None
        self._host = _address(url)
        self._root = f"{'https' if secure else 'http'}://{self._host}/v2"
        self._api = api
        self._requests: EncodedRequests[bytes] = EncodedRequests()

    async def extensions(self) -> frozenset[str]:
        return await self._api.extensions()

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return await self._api.metadata(model, version)

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        return await self._api.config(model, version)

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

    @property
    def engine_endpoint(self) -> tuple[str, int, TlsSettings | None]:
        """(host, port, TLS) for the canary's engine: TLS None in clear, else this
        client's own context, the URL's host the name its certificate must carry."""
        parts = urlsplit(self._root)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if self._ssl is not None else 80)
        return host, port, None if self._ssl is None else TlsSettings(self._ssl, host)

    def wire_request(self, encoded: bytes, *, timeout: float, limits: AnswerLimits) -> HttpRequest:
        """``encoded`` (:meth:`infer_request`'s or :meth:`encode_infer`'s bytes) as the
        engine sends it, its answer read within ``limits``. Always fits: HTTP/1.1 has no
        window (``timeout`` is the engine's to keep)."""
        return HttpRequest(encoded, limits)

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
        self._api.close()


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
    """A target's gRPC canary client: the ``ModelInfer`` calls the engine sends
    (:meth:`wire_request`), the library path's (:meth:`library_call`), and the model's
    metadata and config over the target's HTTP API (``api``), none of which imports
    ``grpc`` or ``tritonclient.grpc``; ``tritonclient.grpc.aio`` is made on first use
    for a gRPC-only target's metadata and config."""

    protocol = "grpc"

    def __init__(self, url: str, api: CanaryModelApi, tls: ClientTLS | None = None) -> None:
        """``api``: the target's model APIs (this client closes them)."""
        secure = tls_for(url, tls)
        self._authority = _address(url)
        self._tls = secure
        self._api = api
        self._requests: EncodedRequests[bytes] = EncodedRequests()

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

    def infer_request(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool = False
    ) -> bytes:
        """The serialized ``ModelInferRequest`` of these tensors, made once while they
        stay the same objects (``binary``: gRPC has one form)."""
        return self._requests.get(
            (model, version, False), tensors, lambda: grpc_infer_request(model, version, tensors)
        )

    def encode_infer(
        self,
        model: str,
        version: str,
        tensors: Sequence[Tensor],
        *,
        binary: bool = False,
        parameters: Mapping[str, Scalar] | None = None,
    ) -> bytes:
        """The serialized ``ModelInferRequest`` with the request ``parameters`` given."""
        return grpc_infer_request(model, version, tensors, parameters)

    def wire_request(
        self, encoded: bytes, *, timeout: float, limits: AnswerLimits
    ) -> UnaryRequest | None:
        """``encoded`` as the engine's ``ModelInfer`` call (its deadline in
        ``grpc-timeout``, its answer read within ``limits``); None when the message is
        over a fresh connection's flow-control window (the library path sends it)."""
        if len(encoded) + 5 > MAX_REQUEST_DATA:
            return None
        call = grpc_unary_request(self._authority, GRPC_MODEL_INFER, encoded, timeout)
        return replace(call, limits=limits)

    def library_call(self, message: bytes, limits: AnswerLimits) -> LibraryCall:
        """``message`` (the ``ModelInfer`` the engine sends) on a ``grpcio`` channel of its
        own, read by ``tritonclient`` (probe/canary/library_path.py)."""
        return grpc_library_call(self._authority, self._tls, message, limits)

    async def extensions(self) -> frozenset[str]:
        return await self._api.extensions()

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return await self._api.metadata(model, version)

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        return await self._api.config(model, version)

    async def close(self) -> None:
        self._api.close()


def grpc_infer_answer(reply: GrpcReply, received: float) -> Any:
    """A gRPC call the canary's engine finished made into the decoded result, stamped
    ``received_at``; a non-OK status raises :class:`ServerError` with the face
    ``tritonclient``'s ``get_error_grpc`` gives a ``grpc.RpcError`` (status
    ``StatusCode.NAME``, the server's message), so it is classified and logged alike."""
    if reply.status != 0:
        raise ServerError(reply.message, status=reply.status_name)
    return decode_grpc_infer_response(reply.payload, received)


def client_for(
    protocol: str,
    http_url: str,
    grpc_url: str,
    tls: ClientTLS | None = None,
    *,
    grpc_only: bool = False,
) -> InferenceClient:
    """The client for ``protocol`` pointed at the matching endpoint of a target, its
    model APIs over the target's HTTP API unless the target is ``grpc_only``
    (:func:`~tritonwatch.triton_api.endpoint.api_endpoint`), which keeps the daemon of a
    gRPC canary free of ``grpc`` and ``tritonclient.grpc``."""
    api = CanaryModelApi(api_endpoint(http_url, grpc_url, tls, grpc_only=grpc_only))
    if protocol == "grpc":
        return GrpcInferenceClient(grpc_url, api, tls)
    return HttpInferenceClient(http_url, api, tls)
