"""Triton's statistics and config APIs for one model, over the protocol the target speaks.

A target configured by its gRPC endpoint (``url: grpc://…``, no ``http_url``) may have
no reachable HTTP port at all — the port Triton would use on that host is only a guess
(``effective_http_url``), and deployments that expose gRPC alone are common. So such a
target is asked over gRPC (``ModelStatistics`` and ``ModelConfig``, with the target's
TLS), and every other target over HTTP, as before. ``/metrics`` stays HTTP either way:
Triton serves it nowhere else.

Statistics can also be read for every loaded model (every ready version) at once —
``GET {http}/v2/models/stats``, ``ModelStatistics`` with an empty name — in the same
``{"model_stats": [...]}`` shape: one request a cycle instead of one per model
(:meth:`~tritonwatch.scrape.interfaces.ModelApis.read_all_statistics`). Triton answers
both forms from the same ready versions, so the entries are the same as the per-model
answers'.

Both readers answer an :class:`~tritonwatch.scrape.interfaces.ApiAnswer` holding the
document in the HTTP answer's shape (gRPC answers are converted by
:mod:`tritonwatch.common.grpc_json`), so everything after them — parsing, rates,
config changes — is one code path. The rules are the same on both: the deadline is
the cycle's, the size cap is ``max_bytes`` (the decoded body over HTTP, the message
over gRPC), failures are outcomes and never exceptions, and
a server that lacks the API says so — HTTP 400/404/405/501 without Triton's
``{"error": ...}`` body (which it uses for a model it does not know), or gRPC
``UNIMPLEMENTED`` (a model it does not know is ``NOT_FOUND`` or ``INVALID_ARGUMENT``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import requests

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.kserve import model_path
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.observations import ModelKey
from tritonwatch.records.target_state import FetchStatus, ScrapeSource
from tritonwatch.scrape.fetch import DEFAULT_MAX_BYTES, fetch
from tritonwatch.scrape.interfaces import ApiAnswer, ModelApis

_LACKS_API_HTTP = frozenset({400, 404, 405, 501})
_LACKS_API_GRPC = "UNIMPLEMENTED"
_GRPC_STATUSES = {
    "DEADLINE_EXCEEDED": FetchStatus.TIMEOUT,
    "UNAVAILABLE": FetchStatus.CONNECTION_ERROR,
    # What gRPC answers for a message over the channel's max_receive_message_length.
    "RESOURCE_EXHAUSTED": FetchStatus.TOO_LARGE,
}
_MAX_ERROR_CHARS = 200


def _triton_error(body: bytes) -> bool:
    """True for Triton's error body ``{"error": "..."}``: the API exists, the request failed."""
    try:
        document = json.loads(body)
    except ValueError:
        return False
    return isinstance(document, dict) and isinstance(document.get("error"), str)


class HttpModelApis:
    """``GET {http}/v2/models/{m}[/versions/{v}]/stats``, ``…/config`` and
    ``GET {http}/v2/models/stats``.

    The session is the scraper's (shared with ``/metrics``), so it is not closed here.
    """

    protocol = "http"

    def __init__(
        self,
        base_url: str,
        session: requests.Session,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._session = session
        self._clock = clock
        self._max_bytes = max_bytes

    def url(self, source: ScrapeSource, key: ModelKey) -> str:
        """The endpoint: the source's name is the path's last part (``stats``, ``config``)."""
        return f"{self._base}{model_path(key.model, key.version)}/{source.value}"

    def all_statistics_url(self) -> str:
        return f"{self._base}/v2/models/stats"

    def read(self, source: ScrapeSource, key: ModelKey, deadline: float) -> ApiAnswer:
        return self._get(self.url(source, key), deadline)

    def read_all_statistics(self, deadline: float) -> ApiAnswer:
        return self._get(self.all_statistics_url(), deadline)

    def _get(self, url: str, deadline: float) -> ApiAnswer:
        result = fetch(
            self._session, url, deadline=deadline, clock=self._clock, max_bytes=self._max_bytes
        )
        duration, code = result.duration_seconds, result.http_status
        if (
            result.status is FetchStatus.HTTP_ERROR
            and code in _LACKS_API_HTTP
            and not _triton_error(result.body)
        ):
            missing = {"http_status": code}
            return ApiAnswer(
                result.status, duration, error=result.error, missing_api=missing, http_status=code
            )
        if not result.ok:
            return ApiAnswer(result.status, duration, error=result.error, http_status=code)
        try:
            document = json.loads(result.body)
        except ValueError as error:
            return ApiAnswer(FetchStatus.BAD_RESPONSE, duration, error=str(error), http_status=code)
        return ApiAnswer(FetchStatus.SUCCESS, duration, document, http_status=code)

    def close(self) -> None:
        """Nothing of its own to release."""


class GrpcModelApis:
    """The ``ModelStatistics`` and ``ModelConfig`` RPCs on one ``tritonclient.grpc`` client.

    The client (one channel, reconnecting by itself) is made on first use, so building
    a scraper costs nothing and a TLS file that cannot be read is one failed read, tried
    again on the next. Its receive limit is ``max_bytes``.
    """

    protocol = "grpc"

    def __init__(
        self,
        url: str,
        tls: ClientTLS | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._address = url.partition("://")[2].rstrip("/")
        self._tls = tls_for(url, tls)
        self._clock = clock
        self._max_bytes = max_bytes
        self._client: Any = None

    def _connected(self) -> Any:
        if self._client is None:
            import tritonclient.grpc as grpcclient  # noqa: PLC0415 - heavy; load on use

            # The PEM files are read here, not by tritonclient: one it cannot open would
            # leave a half-built client whose __del__ raises.
            creds = self._tls.grpc_credentials() if self._tls is not None else None
            self._client = grpcclient.InferenceServerClient(
                self._address,
                creds=creds,
                channel_args=[("grpc.max_receive_message_length", self._max_bytes)],
            )
        return self._client

    def read(self, source: ScrapeSource, key: ModelKey, deadline: float) -> ApiAnswer:
        return self._call(source, key.model, key.version, deadline)

    def read_all_statistics(self, deadline: float) -> ApiAnswer:
        return self._call(ScrapeSource.STATS, "", "", deadline)  # no name: every model

    def _call(self, source: ScrapeSource, model: str, version: str, deadline: float) -> ApiAnswer:
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        from tritonwatch.common.grpc_json import http_form  # noqa: PLC0415 - imports tritonclient.grpc

        started = self._clock()
        remaining = deadline - started
        if remaining <= 0:
            return ApiAnswer(FetchStatus.TIMEOUT, 0.0, error="no time left in this scrape")
        try:
            client = self._connected()
            ask = (
                client.get_inference_statistics
                if source is ScrapeSource.STATS
                else client.get_model_config
            )
            message = ask(model, version, client_timeout=remaining)
        except InferenceServerException as error:
            return self._failed(error, self._clock() - started)
        except (OSError, ValueError) as error:
            # A TLS file gone since the config was checked; the channel closed by a
            # reload while this cycle ran ("Cannot invoke RPC on closed channel!").
            duration = self._clock() - started
            return ApiAnswer(FetchStatus.CONNECTION_ERROR, duration, error=str(error))
        duration = self._clock() - started
        try:
            document = http_form(message)
        except ValueError as error:
            return ApiAnswer(FetchStatus.BAD_RESPONSE, duration, error=str(error))
        return ApiAnswer(FetchStatus.SUCCESS, duration, document)

    @staticmethod
    def _failed(error: Any, duration: float) -> ApiAnswer:
        code = str(error.status() or "").removeprefix("StatusCode.")
        text = f"gRPC {code or 'error'}: {error.message()}"[:_MAX_ERROR_CHARS]
        if code == _LACKS_API_GRPC:
            missing = {"grpc_status": code}
            return ApiAnswer(FetchStatus.GRPC_ERROR, duration, error=text, missing_api=missing)
        return ApiAnswer(_GRPC_STATUSES.get(code, FetchStatus.GRPC_ERROR), duration, error=text)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def model_apis_for(
    target: TargetConfig,
    session: requests.Session,
    clock: Callable[[], float] = time.monotonic,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ModelApis:
    """gRPC for a target configured by its gRPC endpoint with no ``http_url``; HTTP
    (``effective_http_url``) for every other."""
    if target.grpc_only:
        return GrpcModelApis(target.url, target.client_tls, clock, max_bytes)
    return HttpModelApis(target.effective_http_url, session, clock, max_bytes)
