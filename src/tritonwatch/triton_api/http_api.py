"""The model APIs over HTTP: one bounded request per call
(:func:`~tritonwatch.triton_api.fetch.fetch`).

A server lacks an API when it answers 400, 404, 405 or 501 without Triton's
``{"error": "..."}`` body: Triton uses that body for a model it does not know (the
API exists, the model does not), and a server without the API answers its framework's
own page. Model readiness is the status itself: 200 ready, 400 or 404 not (Triton
answers a model that is not ready with a bare 400).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import requests

from tritonwatch.common.kserve import model_path
from tritonwatch.records.target_state import FetchStatus
from tritonwatch.triton_api.answer import ApiAnswer
from tritonwatch.triton_api.calls import ApiCall, ApiKind, wrong_type
from tritonwatch.triton_api.endpoint import ApiEndpoint
from tritonwatch.triton_api.fetch import DEFAULT_MAX_BYTES, FetchResult, fetch

LACKS_API_STATUSES = frozenset({400, 404, 405, 501})
NOT_READY_STATUSES = frozenset({400, 404})
_NO_DOCUMENT = frozenset({ApiKind.LOAD, ApiKind.UNLOAD})
_MAX_MESSAGE_CHARS = 300


def triton_error(body: bytes) -> str | None:
    """The message of Triton's error body ``{"error": "..."}``; None for any other body."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    message = document.get("error") if isinstance(document, dict) else None
    return message[:_MAX_MESSAGE_CHARS] if isinstance(message, str) else None


def http_request(call: ApiCall) -> tuple[str, str, object]:
    """(method, path, JSON body or None) of ``call``."""
    kind, model = call.kind, call.model
    if kind is ApiKind.SERVER_METADATA:
        return "GET", "/v2", None
    if kind is ApiKind.REPOSITORY_INDEX:
        return "POST", "/v2/repository/index", {"ready": True} if call.ready_only else {}
    if kind in (ApiKind.LOAD, ApiKind.UNLOAD):
        path = f"/v2/repository/models/{quote(model, safe='')}/{kind}"
        if call.config is None:
            return "POST", path, {}
        return "POST", path, {"parameters": {"config": json.dumps(call.config)}}
    if kind is ApiKind.STATISTICS and not model:
        return "GET", "/v2/models/stats", None
    suffix = {
        ApiKind.MODEL_CONFIG: "/config",
        ApiKind.MODEL_READY: "/ready",
        ApiKind.STATISTICS: "/stats",
    }.get(kind, "")
    return "GET", model_path(model, call.version) + suffix, None


def new_session(endpoint: ApiEndpoint) -> requests.Session:
    """A session of one client's own, with the endpoint's TLS for ``https://``."""
    session = requests.Session()
    tls = endpoint.secure_tls
    if tls is not None:
        tls.configure_session(session)
    return session


class HttpApi:
    """The model APIs at one HTTP base URL, on one ``requests`` session.

    ``session``: one to share (the scraper's, which also reads ``/metrics``), not closed
    here; None: one of its own (:func:`new_session`), closed by :meth:`close`.
    """

    protocol = "http"

    def __init__(
        self,
        endpoint: ApiEndpoint,
        session: requests.Session | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.base = endpoint.http_base
        self._owns_session = session is None
        self._session = session if session is not None else new_session(endpoint)
        self._clock = clock
        self._max_bytes = max_bytes

    def ask(self, call: ApiCall, deadline: float) -> ApiAnswer:
        """``call``'s answer by monotonic time ``deadline``; never raises."""
        method, path, body = http_request(call)
        result = fetch(
            self._session,
            self.base + path,
            deadline=deadline,
            clock=self._clock,
            max_bytes=self._max_bytes,
            method=method,
            json_body=body,
        )
        return answer_of(call.kind, result)

    def close(self) -> None:
        if self._owns_session:
            self._session.close()


def answer_of(kind: ApiKind, result: FetchResult) -> ApiAnswer:
    """The answer to a ``kind`` call that ended as ``result``."""
    duration, code = result.duration_seconds, result.http_status
    if kind is ApiKind.MODEL_READY and (result.ok or code in NOT_READY_STATUSES):
        return ApiAnswer(FetchStatus.SUCCESS, duration, result.ok, http_status=code)
    if not result.ok:
        return _failed(result)
    if kind in _NO_DOCUMENT:
        return ApiAnswer(FetchStatus.SUCCESS, duration, http_status=code)
    try:
        document = json.loads(result.body)
    except (ValueError, RecursionError) as error:
        text = f"answered no JSON: {error}"
        return ApiAnswer(FetchStatus.BAD_RESPONSE, duration, error=text, http_status=code)
    problem = wrong_type(kind, document)
    if problem is not None:
        return ApiAnswer(FetchStatus.BAD_RESPONSE, duration, error=problem, http_status=code)
    return ApiAnswer(FetchStatus.SUCCESS, duration, document, http_status=code)


def _failed(result: FetchResult) -> ApiAnswer:
    """A request that got no 200: an HTTP status says whether the API is missing."""
    duration, code = result.duration_seconds, result.http_status
    if result.status is not FetchStatus.HTTP_ERROR:
        return ApiAnswer(result.status, duration, error=result.error, http_status=code)
    message = triton_error(result.body)
    missing: dict[str, Any] | None = None
    if code in LACKS_API_STATUSES and message is None:
        missing = {"http_status": code}
    return ApiAnswer(
        result.status,
        duration,
        error=result.error,
        missing_api=missing,
        http_status=code,
        message=message or "",
    )
