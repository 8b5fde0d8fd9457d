"""Is the target serving? Triton's readiness endpoint, over the target's own protocol.

This feeds ``tritonwatch_up{target}``. Errors are outcomes, never exceptions: one
unreachable server must not stop the loop that checks the others.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import requests

from tritonwatch.client_tls import ClientTLS, tls_for
from tritonwatch.config.schema import TargetConfig
from tritonwatch.observations import Outcome, ReadinessObservation
from tritonwatch.probe.interfaces import ReadinessProbe

Clock = Callable[[], float]
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def _root_cause(error: Exception) -> str:
    """``Connection refused`` instead of urllib3's three nested exception reprs."""
    text = str(error)
    match = _ERRNO_TEXT.search(text)
    return match.group(1).strip() if match else text[:200]


class HttpReadinessProbe:
    """``GET {url}/v2/health/ready``: 200 means ready, anything else means not."""

    def __init__(
        self,
        target: str,
        base_url: str,
        timeout: float,
        clock: Clock = time.monotonic,
        tls: ClientTLS | None = None,
    ):
        self._target = target
        self._url = f"{base_url.rstrip('/')}/v2/health/ready"
        self._timeout = timeout
        self._clock = clock
        self._session = requests.Session()
        if (secure := tls_for(base_url, tls)) is not None:
            secure.configure_session(self._session)

    def check(self) -> ReadinessObservation:
        started = self._clock()
        try:
            response = self._session.get(self._url, timeout=self._timeout)
        except requests.Timeout as error:
            return self._observe(started, Outcome.TIMEOUT, error=str(error))
        except requests.ConnectionError as error:
            return self._observe(started, Outcome.CONNECTION_ERROR, error=_root_cause(error))
        except requests.RequestException as error:
            return self._observe(started, Outcome.HTTP_ERROR, error=str(error))
        if response.status_code == 200:
            return self._observe(started, Outcome.SUCCESS, ready=True)
        return self._observe(started, Outcome.HTTP_ERROR, error=f"HTTP {response.status_code}")

    def _observe(
        self, started: float, outcome: Outcome, *, ready: bool = False, error: str = ""
    ) -> ReadinessObservation:
        return _observation(self._target, self._clock, started, outcome, ready=ready, error=error)

    def close(self) -> None:
        self._session.close()


class GrpcReadinessProbe:
    """``ServerReady`` over gRPC with tritonclient; a channel is kept open between checks."""

    def __init__(
        self,
        target: str,
        url: str,
        timeout: float,
        clock: Clock = time.monotonic,
        tls: ClientTLS | None = None,
    ):
        import tritonclient.grpc as grpcclient  # noqa: PLC0415 - grpc is heavy; load on use

        address = url.partition("://")[2]
        self._target = target
        self._timeout = timeout
        self._clock = clock
        secure = tls_for(url, tls)
        options = secure.tritonclient_grpc_options() if secure is not None else {}
        self._client = grpcclient.InferenceServerClient(address, **options)

    def check(self) -> ReadinessObservation:
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        started = self._clock()
        try:
            ready = bool(self._client.is_server_ready(client_timeout=self._timeout))
        except InferenceServerException as error:
            status = str(error.status() or "")
            outcome = Outcome.TIMEOUT if "DEADLINE_EXCEEDED" in status else Outcome.GRPC_ERROR
            if "UNAVAILABLE" in status:
                outcome = Outcome.CONNECTION_ERROR
            now = self._clock()
            return ReadinessObservation(
                self._target, now, outcome, False, now - started, str(error)
            )
        now = self._clock()
        outcome = Outcome.SUCCESS if ready else Outcome.GRPC_ERROR
        error_text = "" if ready else "server not ready"
        return ReadinessObservation(self._target, now, outcome, ready, now - started, error_text)

    def close(self) -> None:
        self._client.close()


def _observation(
    target: str, clock: Clock, started: float, outcome: Outcome, *, ready: bool, error: str
) -> ReadinessObservation:
    now = clock()
    return ReadinessObservation(target, now, outcome, ready, now - started, error)


def readiness_probe_for(target: TargetConfig, timeout: float) -> ReadinessProbe:
    """The probe that speaks the protocol of ``target.url``."""
    if target.protocol == "grpc":
        return GrpcReadinessProbe(target.name, target.url, timeout, tls=target.client_tls)
    return HttpReadinessProbe(target.name, target.url, timeout, tls=target.client_tls)
