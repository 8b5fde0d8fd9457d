"""Is the target serving? Triton's readiness endpoint, over the target's own protocol.

This feeds ``tritonwatch_up{target}``. Errors are outcomes, never exceptions: one
unreachable server must not stop the loop that checks the others.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable

import requests

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.kserve import GRPC_SERVER_READY
from tritonwatch.config.schema import TargetConfig
from tritonwatch.probe.interfaces import ReadinessProbe
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.wire.grpc_codes import DEADLINE_EXCEEDED, UNAVAILABLE
from tritonwatch.wire.http2 import (
    ClientSession,
    GrpcReply,
    Http2ClosedError,
    Http2Error,
    grpc_unary_request,
)
from tritonwatch.wire.kserve_protobuf import ProtobufDecodeError, decode_server_ready_response

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
    """``ServerReady`` over gRPC with tritonclient (TLS targets); a channel is kept open
    between checks."""

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
    """The probe that speaks the protocol of ``target.url``: plaintext gRPC on the
    h2c client, gRPC over TLS on tritonclient's, HTTP(S) on ``requests``."""
    if target.protocol == "grpc" and tls_for(target.url, target.client_tls) is None:
        return H2cReadinessProbe(target.name, target.url, timeout)
    if target.protocol == "grpc":
        return GrpcReadinessProbe(target.name, target.url, timeout, tls=target.client_tls)
    return HttpReadinessProbe(target.name, target.url, timeout, tls=target.client_tls)


# -- plaintext gRPC without grpc ---------------------------------------------------------
# Why not tritonclient's gRPC client here too: importing it loads ``grpc``, protobuf and
# numpy, about 28 MiB, into a daemon whose gRPC canaries, scrapes and discovery need none
# of them when the target also names its HTTP API (``http_url``): only the readiness
# check of a ``grpc://`` target still asked for them. The call is one empty request and
# a one-field answer, spoken with the canary's sans-I/O HTTP/2 client on a blocking
# socket kept open between checks (a new one after any failure).


class H2cReadinessProbe:
    """``ServerReady`` on one h2c connection: ready, not ready, or why no answer came."""

    def __init__(self, target: str, url: str, timeout: float, clock: Clock = time.monotonic):
        address = url.partition("://")[2].rstrip("/")
        host, _, port = address.rpartition(":")
        self._target = target
        self._address = (host.strip("[]"), int(port))
        self._timeout = timeout
        self._clock = clock
        self._request = grpc_unary_request(address, GRPC_SERVER_READY, b"", timeout)
        self._socket: socket.socket | None = None
        self._session = ClientSession()

    def check(self) -> ReadinessObservation:
        started = self._clock()
        try:
            reply = self._call()
        except (OSError, Http2Error) as error:  # (timeouts and Http2ClosedError are OSErrors)
            self.close()
            outcome, text = _call_failure(error)
        else:
            outcome, text = _judged(reply)
        ready = outcome == Outcome.SUCCESS
        return self._observe(started, outcome, ready=ready, error=text)

    def _call(self) -> GrpcReply:
        """One ServerReady call, on the kept connection while it can take one; the whole
        call (connecting included) bounded by the probe's timeout."""
        deadline = time.monotonic() + self._timeout
        if self._socket is None or not self._session.can_send(self._request):
            self.close()
            self._socket = socket.create_connection(self._address, timeout=self._timeout)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._session = ClientSession()
        sock = self._socket
        sock.sendall(self._session.start(self._request))
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self._timeout:g} s passed")
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                raise Http2ClosedError("connection closed by the server")
            reply = self._session.feed(data)
            owed = self._session.take_output()
            if owed:
                sock.sendall(owed)  # SETTINGS and PING acknowledgements, window updates
            if reply is not None:
                return reply

    def _observe(
        self, started: float, outcome: Outcome, *, ready: bool = False, error: str = ""
    ) -> ReadinessObservation:
        return _observation(self._target, self._clock, started, outcome, ready=ready, error=error)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _call_failure(error: OSError | Http2Error) -> tuple[Outcome, str]:
    """What a call that got no gRPC answer says: timed out, no connection, or no gRPC."""
    if isinstance(error, TimeoutError):
        return Outcome.TIMEOUT, f"no answer in time: {error}"
    if isinstance(error, Http2Error):
        return Outcome.GRPC_ERROR, f"not gRPC: {error}"
    return Outcome.CONNECTION_ERROR, _root_cause(error) if str(error) else type(error).__name__


def _judged(reply: GrpcReply) -> tuple[Outcome, str]:
    """A ServerReady answer's outcome: ready, not ready, or the status it failed with
    (named as tritonclient's error would name it)."""
    if reply.status:
        outcome = {DEADLINE_EXCEEDED: Outcome.TIMEOUT, UNAVAILABLE: Outcome.CONNECTION_ERROR}
        text = f"{reply.status_name}: {reply.message}" if reply.message else reply.status_name
        return outcome.get(reply.status, Outcome.GRPC_ERROR), text
    try:
        ready = decode_server_ready_response(reply.payload)
    except ProtobufDecodeError as error:
        return Outcome.GRPC_ERROR, f"bad ServerReadyResponse: {error}"
    return (Outcome.SUCCESS, "") if ready else (Outcome.GRPC_ERROR, "server not ready")
