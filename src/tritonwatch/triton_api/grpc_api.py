"""The model APIs over gRPC, on one ``tritonclient.grpc`` client, for targets reachable
by gRPC alone.

``tritonclient.grpc`` (and with it ``grpc``) is imported when the first call is made, so
a daemon whose targets all speak HTTP never loads it. Answers are converted to the HTTP
API's shape by :mod:`tritonwatch.common.grpc_json`. A server lacks an API when it
answers ``UNIMPLEMENTED`` (a model it does not know is ``NOT_FOUND`` or
``INVALID_ARGUMENT``). The size cap is the channel's receive limit: a message over it is
``RESOURCE_EXHAUSTED``, a ``too_large`` outcome.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tritonwatch.records.target_state import FetchStatus
from tritonwatch.triton_api.answer import ApiAnswer
from tritonwatch.triton_api.calls import ApiCall, ApiKind
from tritonwatch.triton_api.endpoint import ApiEndpoint
from tritonwatch.triton_api.fetch import DEFAULT_MAX_BYTES

LACKS_API_CODE = "UNIMPLEMENTED"
CODE_STATUSES = {
    "DEADLINE_EXCEEDED": FetchStatus.TIMEOUT,
    "UNAVAILABLE": FetchStatus.CONNECTION_ERROR,
    # What gRPC answers for a message over the channel's max_receive_message_length.
    "RESOURCE_EXHAUSTED": FetchStatus.TOO_LARGE,
}
_MAX_ERROR_CHARS = 200


def _send(client: Any, call: ApiCall, timeout: float) -> Any:
    """``call`` on ``tritonclient``'s client: its reply (a message, a bool or None)."""
    kind, model, version = call.kind, call.model, call.version
    if kind is ApiKind.SERVER_METADATA:
        return client.get_server_metadata(client_timeout=timeout)
    if kind is ApiKind.REPOSITORY_INDEX:
        return client.get_model_repository_index(client_timeout=timeout)
    if kind is ApiKind.LOAD:
        config = None if call.config is None else json.dumps(call.config)
        return client.load_model(model, config=config, client_timeout=timeout)
    if kind is ApiKind.UNLOAD:
        return client.unload_model(model, client_timeout=timeout)
    ask = {
        ApiKind.MODEL_METADATA: client.get_model_metadata,
        ApiKind.MODEL_CONFIG: client.get_model_config,
        ApiKind.MODEL_READY: client.is_model_ready,
        ApiKind.STATISTICS: client.get_inference_statistics,  # no model: every model
    }[kind]
    return ask(model, version, client_timeout=timeout)


def _document(kind: ApiKind, reply: Any) -> Any:
    """The reply in the HTTP API's shape.

    Raises:
        ValueError: the reply cannot be converted.
    """
    from tritonwatch.common.grpc_json import http_form  # noqa: PLC0415 - imports tritonclient.grpc

    if kind is ApiKind.MODEL_READY:
        return bool(reply)
    if kind in (ApiKind.LOAD, ApiKind.UNLOAD):
        return None
    document = http_form(reply)
    if kind is ApiKind.REPOSITORY_INDEX:
        return document.get("models", [])  # HTTP answers the list itself
    return document


class GrpcApi:
    """The model APIs at one gRPC address.

    The client (one channel, reconnecting by itself) is made on first use, under a lock
    (calls may come from several threads), so building one costs nothing and a TLS file
    that cannot be read is one failed call, tried again on the next.
    """

    protocol = "grpc"

    def __init__(
        self,
        endpoint: ApiEndpoint,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._address = endpoint.address
        self._tls = endpoint.secure_tls
        self._clock = clock
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._client: Any = None

    def _connected(self) -> Any:
        with self._lock:
            if self._client is None:
                import tritonclient.grpc as grpcclient  # noqa: PLC0415 - heavy; load on use

                # The PEM files are read here, not by tritonclient: one it cannot open
                # would leave a half-built client whose __del__ raises.
                creds = self._tls.grpc_credentials() if self._tls is not None else None
                self._client = grpcclient.InferenceServerClient(
                    self._address,
                    creds=creds,
                    channel_args=[("grpc.max_receive_message_length", self._max_bytes)],
                )
            return self._client

    def ask(self, call: ApiCall, deadline: float) -> ApiAnswer:
        """``call``'s answer by monotonic time ``deadline``; never raises."""
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        started = self._clock()
        remaining = deadline - started
        if remaining <= 0:
            return ApiAnswer(FetchStatus.TIMEOUT, 0.0, error="no time left in this scrape")
        try:
            reply = _send(self._connected(), call, remaining)
        except InferenceServerException as error:
            return failed(error, self._clock() - started)
        except (OSError, ValueError) as error:
            # A TLS file gone since the config was checked; the channel closed by a
            # reload while the call ran ("Cannot invoke RPC on closed channel!").
            duration = self._clock() - started
            return ApiAnswer(FetchStatus.CONNECTION_ERROR, duration, error=str(error))
        duration = self._clock() - started
        try:
            document = _document(call.kind, reply)
        except ValueError as error:
            return ApiAnswer(FetchStatus.BAD_RESPONSE, duration, error=str(error))
        return ApiAnswer(FetchStatus.SUCCESS, duration, document)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def failed(error: Any, duration: float) -> ApiAnswer:
    """The answer for ``tritonclient``'s ``InferenceServerException``."""
    code = str(error.status() or "").removeprefix("StatusCode.")
    message = str(error.message() or "")
    text = f"gRPC {code or 'error'}: {message}"[:_MAX_ERROR_CHARS]
    missing = {"grpc_status": code} if code == LACKS_API_CODE else None
    status = CODE_STATUSES.get(code, FetchStatus.GRPC_ERROR)
    return ApiAnswer(
        status,
        duration,
        error=text,
        missing_api=missing,
        grpc_code=code or None,
        message=message[:_MAX_ERROR_CHARS],
    )
