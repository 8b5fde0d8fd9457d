"""One asyncio face over ``tritonclient``'s HTTP and gRPC aio clients.

The canary and the sweep speak to a server through :class:`InferenceClient`, so the
protocol is a constructor argument and error handling is written once:
:func:`classify_error` maps every way a call can fail to an :class:`Outcome`.
Triton-only APIs (model config) answer None on servers that lack them, which is
how the canary also works against any KServe v2 / Open Inference Protocol server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
from tritonclient.utils import InferenceServerException

from tritonwatch.client_tls import ClientTLS, tls_for
from tritonwatch.observations import Outcome
from tritonwatch.probe.infer_response import (
    ResponseDecodeError,
    decode_grpc_infer_response,
    decode_http_infer_response,
    decompressed,
    http_status_error,
)
from tritonwatch.probe.payload import Tensor

_UNSUPPORTED_HTTP = {"404", "400", "501"}
_UNSUPPORTED_GRPC = ("UNIMPLEMENTED", "NOT_FOUND")
ACCEPT_ENCODING = "gzip, deflate"
"""What the HTTP canary offers to read: exactly the encodings its own decoder inflates
(aiohttp's default would also offer ``br`` when brotli is installed). Triton then gzips
infer answers, as it does for ``tritonclient.http.aio``."""
BINARY_TENSOR_EXTENSION = "binary_tensor_data"
"""The name ``GET /v2`` lists when the server reads and writes binary tensors."""


class InferenceClient(Protocol):
    protocol: str

    async def extensions(self) -> frozenset[str]: ...

    async def metadata(self, model: str, version: str) -> dict[str, Any]: ...

    async def config(self, model: str, version: str) -> dict[str, Any] | None: ...

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any: ...

    async def close(self) -> None: ...


_GRPC_STATUS_OUTCOMES = {
    "DEADLINE_EXCEEDED": Outcome.TIMEOUT,
    "UNAVAILABLE": Outcome.CONNECTION_ERROR,
}


def _classify_server_error(error: InferenceServerException, protocol: str) -> Outcome:
    status = str(error.status() or "")
    if protocol == "grpc":
        code = status.removeprefix("StatusCode.")
        return _GRPC_STATUS_OUTCOMES.get(code, Outcome.GRPC_ERROR)
    # tritonclient.http reports undecodable bodies with a status too; no status at
    # all means the client could not make sense of a reply.
    return Outcome.HTTP_ERROR if status else Outcome.BAD_RESPONSE


def classify_error(error: BaseException, protocol: str) -> Outcome:
    """The outcome label for a failed call (docs/design.md §12: what each client raises)."""
    if isinstance(error, InferenceServerException):
        return _classify_server_error(error, protocol)
    if isinstance(error, ResponseDecodeError):
        return Outcome.BAD_RESPONSE
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return Outcome.TIMEOUT
    if isinstance(error, aiohttp.ClientConnectionError | ConnectionError | OSError):
        return Outcome.CONNECTION_ERROR
    if isinstance(error, aiohttp.ClientResponseError):
        return Outcome.HTTP_ERROR
    return Outcome.BAD_RESPONSE


def http_status(error: BaseException) -> int | None:
    """The HTTP status of an HTTP call's failure, when the server answered one."""
    if isinstance(error, InferenceServerException):
        status = str(error.status() or "")
        return int(status) if status.isdigit() else None
    if isinstance(error, aiohttp.ClientResponseError):
        return error.status
    return None


def is_refused_connection(error: BaseException) -> bool:
    """True when nothing listened at the address (the readiness probe and the circuit
    breaker already say so); every other failure is worth a log line of its own."""
    if isinstance(error, InferenceServerException):
        text = str(error.message() or "")
        return "UNAVAILABLE" in str(error.status() or "") and "onnection refused" in text
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        if isinstance(current, aiohttp.ClientConnectorError):
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


def is_unsupported(error: InferenceServerException, protocol: str) -> bool:
    """True when the server does not implement the API (not when it failed)."""
    status = str(error.status() or "")
    if protocol == "grpc":
        return any(code in status for code in _UNSUPPORTED_GRPC)
    return status in _UNSUPPORTED_HTTP


def _address(url: str) -> str:
    return url.partition("://")[2].rstrip("/")


class HttpInferenceClient:
    """KServe v2 over HTTP on one aiohttp session (so one connection pool per target).

    Requests carry binary tensors (Triton's extension, encoded by ``tritonclient``) or
    plain JSON ones (:func:`json_request_body`), as the canary chose from
    :meth:`extensions`. Answers are decoded by :mod:`~tritonwatch.probe.infer_response`,
    whose errors name the fault (``tritonclient``'s ``InferResult`` raises ``KeyError``,
    ``TypeError``, … on a malformed answer). A non-200 answer raises
    ``InferenceServerException`` with the status, as ``tritonclient.http`` does, so
    errors are classified the same way.
    """

    protocol = "http"

    def __init__(self, url: str, connections: int = 64, tls: ClientTLS | None = None) -> None:
        import tritonclient.http.aio as httpclient  # noqa: PLC0415 - heavy; load on use

        secure = tls_for(url, tls)
        self._ssl = secure.ssl_context() if secure is not None else None
        self._root = f"{'https' if secure else 'http'}://{_address(url)}/v2"
        self._base = f"{self._root}/models"
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._module = httpclient
        self._extensions: frozenset[str] | None = None

    def _http(self) -> aiohttp.ClientSession:
        """Made on first use, inside the event loop that will run it (aiohttp's rule).

        ``auto_decompress=False``: bodies arrive as sent and
        :func:`~tritonwatch.probe.infer_response.decompressed` inflates them once, within
        its limit. aiohttp inflating too made Triton's gzipped answers (it compresses
        whenever ``Accept-Encoding`` allows) plain text that was then inflated again:
        every answer a ``bad_response``.
        """
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl or True)
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                headers={"Accept-Encoding": ACCEPT_ENCODING},
            )
        return self._session

    def _model_url(self, model: str, version: str) -> str:
        url = f"{self._base}/{quote(model)}"
        return f"{url}/versions/{quote(version)}" if version else url

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with self._http().get(url) as response:
            body = await response.read()
        if response.status != 200:
            raise _status_error(response.status, body, response.headers.get("Content-Encoding"))
        body = decompressed(body, response.headers.get("Content-Encoding"))
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
            InferenceServerException, ResponseDecodeError, OSError, TimeoutError: when the
            server metadata cannot be read; nothing is cached then.
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
        except InferenceServerException as error:
            if is_unsupported(error, self.protocol):
                return None
            raise

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        body, headers = self._binary_body(tensors) if binary else json_request_body(tensors)
        url = self._model_url(model, version) + "/infer"
        async with asyncio.timeout(timeout):  # not wait_for: see ModelCanary.prepare
            async with self._http().post(url, data=body, headers=headers) as response:
                payload = await response.read()
        encoding = response.headers.get("Content-Encoding")
        if response.status != 200:
            raise _status_error(response.status, payload, encoding)
        return decode_http_infer_response(
            payload, response.headers.get("Inference-Header-Content-Length"), encoding
        )

    def _binary_body(self, tensors: Sequence[Tensor]) -> tuple[bytes, dict[str, str]]:
        """Triton's binary tensor extension, encoded by ``tritonclient`` (which also asks
        for binary outputs)."""
        inputs = []
        for tensor in tensors:
            infer_input = self._module.InferInput(
                tensor.name, list(tensor.data.shape), tensor.datatype
            )
            infer_input.set_data_from_numpy(tensor.data, binary_data=True)
            inputs.append(infer_input)
        body, json_size = self._module.InferenceServerClient.generate_request_body(inputs)
        headers = {"Content-Type": "application/octet-stream"}
        if json_size is not None:
            headers["Inference-Header-Content-Length"] = str(json_size)
        return bytes(body), headers

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def json_request_body(tensors: Sequence[Tensor]) -> tuple[bytes, dict[str, str]]:
    """A plain KServe v2 JSON request: no Triton parameter (``tritonclient`` would add
    ``binary_data_output``, an extension a server without it may refuse)."""
    inputs = []
    for tensor in tensors:
        flat = tensor.data.reshape(-1)
        if tensor.datatype == "BYTES":
            data: list[Any] = [
                item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in flat
            ]
        elif tensor.datatype in ("FP16", "BF16"):
            data = flat.astype("float32").tolist()
        else:
            data = flat.tolist()
        shape = list(tensor.data.shape)
        inputs.append(
            {"name": tensor.name, "shape": shape, "datatype": tensor.datatype, "data": data}
        )
    return json.dumps({"inputs": inputs}).encode(), {"Content-Type": "application/json"}


def _status_error(status: int, body: bytes, encoding: str | None) -> InferenceServerException:
    """A non-200 answer as ``tritonclient`` raises it; a compressed error body is read
    inflated when it can be (Triton sends errors plain)."""
    with contextlib.suppress(ResponseDecodeError):
        body = decompressed(body, encoding)
    return http_status_error(status, body)


class GrpcInferenceClient:
    """``tritonclient.grpc.aio``; the deadline travels to the server as gRPC's own."""

    protocol = "grpc"

    def __init__(self, url: str, tls: ClientTLS | None = None) -> None:
        import tritonclient.grpc.aio as grpcclient  # noqa: PLC0415 - heavy; load on use

        secure = tls_for(url, tls)
        self._module = grpcclient
        options = secure.tritonclient_grpc_options() if secure is not None else {}
        self._client = grpcclient.InferenceServerClient(_address(url), **options)

    async def extensions(self) -> frozenset[str]:
        """``ServerMetadata``'s extensions (the gRPC canary needs none of them)."""
        result: dict[str, Any] = await self._client.get_server_metadata(as_json=True)
        return frozenset(str(name) for name in result.get("extensions", []))

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._client.get_model_metadata(model, version, as_json=True)
        return normalise_grpc_json(result)

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._client.get_model_config(
                model, version, as_json=True
            )
        except InferenceServerException as error:
            if is_unsupported(error, self.protocol):
                return None
            raise
        return normalise_grpc_json(result.get("config", result))

    async def infer(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool, timeout: float
    ) -> Any:
        inputs = []
        for tensor in tensors:
            infer_input = self._module.InferInput(
                tensor.name, list(tensor.data.shape), tensor.datatype
            )
            infer_input.set_data_from_numpy(tensor.data)
            inputs.append(infer_input)
        result = await self._client.infer(
            model, inputs, model_version=version, client_timeout=timeout
        )
        return decode_grpc_infer_response(result.get_response())

    async def close(self) -> None:
        await self._client.close()


def normalise_grpc_json(message: Mapping[str, Any]) -> dict[str, Any]:
    """gRPC's JSON form leaves defaults out and prints int64 as strings (camelCase, too,
    from some printers); the HTTP form is what the rest of the code reads. The one
    conversion, shared with the scrapers, is :func:`tritonwatch.grpc_json.grpc_json_as_http`."""
    from tritonwatch.grpc_json import grpc_json_as_http  # noqa: PLC0415 - imports tritonclient.grpc

    return grpc_json_as_http(message)


def client_for(
    protocol: str, http_url: str, grpc_url: str, tls: ClientTLS | None = None
) -> InferenceClient:
    """The client for ``protocol`` pointed at the matching endpoint of a target."""
    if protocol == "grpc":
        return GrpcInferenceClient(grpc_url, tls)
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
