"""One asyncio face over ``tritonclient``'s HTTP and gRPC aio clients.

The canary and the sweep speak to a server through :class:`InferenceClient`, so the
protocol is a constructor argument and error handling is written once:
:func:`classify_error` maps every way a call can fail to an :class:`Outcome`.
Triton-only APIs (model config) answer None on servers that lack them, which is
how the canary also works against any KServe v2 / Open Inference Protocol server.
"""

from __future__ import annotations

import asyncio
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
    http_status_error,
)
from tritonwatch.probe.payload import Tensor

_UNSUPPORTED_HTTP = {"404", "400", "501"}
_UNSUPPORTED_GRPC = ("UNIMPLEMENTED", "NOT_FOUND")


class InferenceClient(Protocol):
    protocol: str

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

    Requests are encoded by ``tritonclient`` (binary tensor extension, or JSON); answers
    are decoded by :mod:`~tritonwatch.probe.infer_response`, whose errors name the fault
    (``tritonclient``'s ``InferResult`` raises ``KeyError``, ``TypeError``, … on a
    malformed answer). A non-200 answer raises ``InferenceServerException`` with the
    status, as ``tritonclient.http`` does, so errors are classified the same way.
    """

    protocol = "http"

    def __init__(self, url: str, connections: int = 64, tls: ClientTLS | None = None) -> None:
        import tritonclient.http.aio as httpclient  # noqa: PLC0415 - heavy; load on use

        secure = tls_for(url, tls)
        self._ssl = secure.ssl_context() if secure is not None else None
        self._base = f"{'https' if secure else 'http'}://{_address(url)}/v2/models"
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._module = httpclient

    def _http(self) -> aiohttp.ClientSession:
        """Made on first use, inside the event loop that will run it (aiohttp's rule)."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl or True)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _model_url(self, model: str, version: str) -> str:
        url = f"{self._base}/{quote(model)}"
        return f"{url}/versions/{quote(version)}" if version else url

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with self._http().get(url) as response:
            body = await response.read()
        if response.status != 200:
            raise http_status_error(response.status, body)
        result = json.loads(body)
        if not isinstance(result, dict):
            raise ResponseDecodeError(f"expected a JSON object, got {type(result).__name__}")
        return result

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
        inputs = []
        for tensor in tensors:
            infer_input = self._module.InferInput(
                tensor.name, list(tensor.data.shape), tensor.datatype
            )
            infer_input.set_data_from_numpy(tensor.data, binary_data=binary)
            inputs.append(infer_input)
        body, json_size = self._module.InferenceServerClient.generate_request_body(inputs)
        headers = None if json_size is None else {"Inference-Header-Content-Length": str(json_size)}
        url = self._model_url(model, version) + "/infer"
        async with asyncio.timeout(timeout):  # not wait_for: see ModelCanary.prepare
            async with self._http().post(url, data=body, headers=headers) as response:
                payload = await response.read()
        if response.status != 200:
            raise http_status_error(response.status, payload)
        return decode_http_infer_response(
            payload,
            response.headers.get("Inference-Header-Content-Length"),
            response.headers.get("Content-Encoding"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class GrpcInferenceClient:
    """``tritonclient.grpc.aio``; the deadline travels to the server as gRPC's own."""

    protocol = "grpc"

    def __init__(self, url: str, tls: ClientTLS | None = None) -> None:
        import tritonclient.grpc.aio as grpcclient  # noqa: PLC0415 - heavy; load on use

        secure = tls_for(url, tls)
        self._module = grpcclient
        options = secure.tritonclient_grpc_options() if secure is not None else {}
        self._client = grpcclient.InferenceServerClient(_address(url), **options)

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
    """gRPC's JSON form uses camelCase and strings for int64; the HTTP form is what the
    rest of the code reads (``max_batch_size``, int shapes)."""
    text = json.dumps(message)
    data: dict[str, Any] = json.loads(text)
    if "maxBatchSize" in data:
        data["max_batch_size"] = int(data.pop("maxBatchSize"))
    for key in ("inputs", "outputs"):
        for entry in data.get(key, []):
            entry["shape"] = [int(d) for d in entry.get("shape", [])]
    return data


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
