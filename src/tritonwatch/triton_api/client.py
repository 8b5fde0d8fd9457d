"""The one client of a server's model APIs, blocking, for every part of tritonwatch.

:class:`ModelApiClient` asks one endpoint (:mod:`~tritonwatch.triton_api.endpoint`: HTTP,
or gRPC for a target reachable by gRPC alone) for the server's metadata, a model's
metadata, config, readiness and statistics, every model's statistics, the repository
index, and loads and unloads models. The rules are the same on both protocols:

* every call has a deadline (monotonic time; by default ``timeout`` from the call) and
  a size cap (``max_bytes``: the decoded body over HTTP, the message over gRPC);
* every call answers an :class:`~tritonwatch.triton_api.answer.ApiAnswer` in the HTTP
  API's shape (gRPC answers converted by :mod:`tritonwatch.common.grpc_json`) and never
  raises for anything the server or the network does: failures are outcomes;
* a server that lacks the API says so (``missing_api``): HTTP 400/404/405/501 without
  Triton's ``{"error": …}`` body, or gRPC ``UNIMPLEMENTED``.

Calls are blocking and may come from several threads at once (the canary's
preparations, each from ``asyncio.to_thread``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import requests

from tritonwatch.config.schema import TargetConfig
from tritonwatch.triton_api.answer import ApiAnswer
from tritonwatch.triton_api.calls import ApiCall, ApiKind, ready_rows
from tritonwatch.triton_api.endpoint import ApiEndpoint, ApiProtocol, target_endpoint
from tritonwatch.triton_api.fetch import DEFAULT_MAX_BYTES
from tritonwatch.triton_api.grpc_api import GrpcApi
from tritonwatch.triton_api.http_api import HttpApi

DEFAULT_TIMEOUT = 5.0
"""Seconds a call may take when its caller gives no deadline."""


class ModelApiClient:
    """The model APIs of one server (see the module docstring).

    Args:
        endpoint: where, in which protocol, with which TLS.
        timeout: seconds a call may take when it is given no ``deadline``.
        max_bytes: the largest answer read.
        clock: monotonic seconds (deadlines and durations).
        session: an HTTP session to share (not closed here; its TLS is the owner's);
            None: one of the client's own, with the endpoint's TLS.
    """

    def __init__(
        self,
        endpoint: ApiEndpoint,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
        session: requests.Session | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._timeout = timeout
        self._clock = clock
        self._api: HttpApi | GrpcApi = (
            GrpcApi(endpoint, clock, max_bytes)
            if endpoint.protocol == "grpc"
            else HttpApi(endpoint, session, clock, max_bytes)
        )

    @classmethod
    def for_target(cls, target: TargetConfig, **options: Any) -> ModelApiClient:
        """The client of a configured target (:func:`target_endpoint`)."""
        return cls(target_endpoint(target), **options)

    @property
    def protocol(self) -> ApiProtocol:
        return self.endpoint.protocol

    def ask(self, call: ApiCall, deadline: float | None = None) -> ApiAnswer:
        """``call``'s answer by monotonic time ``deadline`` (None: ``timeout`` from now)."""
        if deadline is None:
            deadline = self._clock() + self._timeout
        answer = self._api.ask(call, deadline)
        if call.kind is ApiKind.REPOSITORY_INDEX and call.ready_only and answer.ok:
            return replace(answer, document=ready_rows(answer.document))
        return answer

    def server_metadata(self, *, deadline: float | None = None) -> ApiAnswer:
        """``GET /v2``, ``ServerMetadata``: name, version, ``extensions``."""
        return self.ask(ApiCall(ApiKind.SERVER_METADATA), deadline)

    def model_metadata(
        self, model: str, version: str = "", *, deadline: float | None = None
    ) -> ApiAnswer:
        """The model's inputs and outputs (``GET /v2/models/{m}[/versions/{v}]``)."""
        return self.ask(ApiCall(ApiKind.MODEL_METADATA, model, version), deadline)

    def model_config(
        self, model: str, version: str = "", *, deadline: float | None = None
    ) -> ApiAnswer:
        """The model's configuration (Triton only: ``missing_api`` elsewhere)."""
        return self.ask(ApiCall(ApiKind.MODEL_CONFIG, model, version), deadline)

    def model_ready(
        self, model: str, version: str = "", *, deadline: float | None = None
    ) -> ApiAnswer:
        """Whether the model (version) is ready: the document is a bool."""
        return self.ask(ApiCall(ApiKind.MODEL_READY, model, version), deadline)

    def statistics(
        self, model: str, version: str = "", *, deadline: float | None = None
    ) -> ApiAnswer:
        """One model's statistics, ``{"model_stats": [...]}`` (one entry per ready
        version asked)."""
        if not model:
            raise ValueError("statistics() names a model; all_statistics() asks for every one")
        return self.ask(ApiCall(ApiKind.STATISTICS, model, version), deadline)

    def all_statistics(self, *, deadline: float | None = None) -> ApiAnswer:
        """Every loaded model's statistics in one answer, the same shape as
        :meth:`statistics` (``GET /v2/models/stats``, ``ModelStatistics`` with no name)."""
        return self.ask(ApiCall(ApiKind.STATISTICS), deadline)

    def repository_index(
        self, *, ready_only: bool = False, deadline: float | None = None
    ) -> ApiAnswer:
        """The repository's models, a list of ``{"name", "version", "state",
        "reason"}``; ``ready_only``: READY ones only."""
        return self.ask(ApiCall(ApiKind.REPOSITORY_INDEX, ready_only=ready_only), deadline)

    def load(
        self,
        model: str,
        config: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
    ) -> ApiAnswer:
        """Loads (or reloads) ``model``; ``config``: a whole model config that replaces
        the repository's (Triton updates an instance-count-only change in place). The
        server answers once the load is done; it refuses unless its model control mode
        is explicit."""
        return self.ask(ApiCall(ApiKind.LOAD, model, config=config), deadline)

    def unload(self, model: str, *, deadline: float | None = None) -> ApiAnswer:
        """Unloads ``model`` (Triton answers before the model is gone)."""
        return self.ask(ApiCall(ApiKind.UNLOAD, model), deadline)

    def close(self) -> None:
        """Releases the gRPC channel or the client's own HTTP session."""
        self._api.close()
