"""The canary's model APIs: the one model-API client, asked from the event loop.

A canary asks its model's metadata and config once a preparation, and, over HTTP, the
server's extensions once for the target: the first canary to ask sends the one request
and every canary asking meanwhile waits for its answer (a thousand canaries starting
together make one ``GET /v2``, not a thousand). It asks through
:class:`~tritonwatch.triton_api.client.ModelApiClient`, the client the scrapers,
discovery, the sweep and ``tune`` use too: over the target's HTTP API, or over gRPC for
a target configured by its gRPC URL alone
(:func:`~tritonwatch.triton_api.endpoint.api_endpoint`). Its calls block, so each runs in
a worker thread; a failure is raised as the error the canary classifies
(:func:`~tritonwatch.probe.canary.clients.classify_error`), with the server's own words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tritonwatch.kserve.infer_response import ResponseDecodeError
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.records.target_state import FetchStatus
from tritonwatch.triton_api.answer import ApiAnswer
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import ApiEndpoint
from tritonwatch.wire.limits import AnswerTooLargeError


class CanaryModelApi:
    """One target's model APIs for its canaries (shared by a target's clients)."""

    def __init__(self, endpoint: ApiEndpoint, *, timeout: float = 5.0) -> None:
        self._client = ModelApiClient(endpoint, timeout=timeout)
        self._extensions: frozenset[str] | None = None
        self._asking: asyncio.Future[frozenset[str]] | None = None

    async def extensions(self) -> frozenset[str]:
        """The ``extensions`` the server metadata lists, asked once: callers while it is
        asked share that one request and its outcome (a failure too); none is cached
        after a failure, so a later caller asks again. A caller that stops waiting
        (cancelled, its own timeout) leaves the request to the others.

        Raises:
            ServerError, ResponseDecodeError, AnswerTooLargeError, OSError, TimeoutError.
        """
        if self._extensions is not None:
            return self._extensions
        if self._asking is None:
            asking = asyncio.ensure_future(self._ask_extensions())
            asking.add_done_callback(self._asked)
            self._asking = asking
        return await asyncio.shield(self._asking)

    def _asked(self, asking: asyncio.Future[frozenset[str]]) -> None:
        self._asking = None
        if not asking.cancelled() and asking.exception() is None:
            self._extensions = asking.result()

    async def _ask_extensions(self) -> frozenset[str]:
        document = _document(await self._ask(self._client.server_metadata))
        listed = document.get("extensions", [])
        if not isinstance(listed, list):
            raise ResponseDecodeError(f"server metadata: 'extensions' is {type(listed).__name__}")
        return frozenset(str(name) for name in listed)

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        """The model's metadata (raises as :meth:`extensions`)."""
        answer = await self._ask(self._client.model_metadata, model, version)
        document: dict[str, Any] = _document(answer)
        return document

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        """The model's config; None when the server has no config API (raises as
        :meth:`extensions` otherwise)."""
        answer = await self._ask(self._client.model_config, model, version)
        if answer.missing_api is not None:
            return None
        document: dict[str, Any] = _document(answer)
        return document

    async def _ask(self, call: Callable[..., ApiAnswer], *args: str) -> ApiAnswer:
        """``call`` in a worker thread; its connection let go after it: a canary asks
        these once a preparation, and a connection kept for them would be one more on
        the server per target for nothing."""
        try:
            return await asyncio.to_thread(call, *args)
        finally:
            self._client.close()

    def close(self) -> None:
        self._client.close()


def _document(answer: ApiAnswer) -> Any:
    """The answer's document, or the failure raised as the canary's errors are."""
    if answer.ok:
        return answer.document
    text = answer.message or answer.reason
    match answer.status:
        case FetchStatus.TIMEOUT:
            raise TimeoutError(answer.reason)
        case FetchStatus.CONNECTION_ERROR:
            raise ConnectionError(answer.reason)
        case FetchStatus.TOO_LARGE:
            raise AnswerTooLargeError(answer.reason)
        case FetchStatus.HTTP_ERROR:
            raise ServerError(text, status=str(answer.http_status or ""))
        case FetchStatus.GRPC_ERROR:
            raise ServerError(text, status=f"StatusCode.{answer.grpc_code}")
    raise ResponseDecodeError(answer.reason)
