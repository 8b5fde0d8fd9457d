"""Is the target serving? Triton's readiness endpoint, over the target's own protocol.

This feeds ``tritonwatch_up{target}``. One probe per protocol, both on the wire code
(HTTP: ``GET /v2/health/ready`` read by :class:`~tritonwatch.wire.http1.Http1Connection`;
gRPC: ``ServerReady`` on :class:`~tritonwatch.wire.http2.ClientSession`) over a blocking
socket kept open between checks, with the target's TLS for ``https://`` and ``grpcs://``
(ALPN ``h2`` for gRPC, as gRPC's own TLS offers it). No ``grpc`` or ``tritonclient``:
tens of MiB a daemon whose canaries, scrapes and discovery need none of them.

Errors are outcomes, never exceptions: one unreachable server must not stop the loop
that checks the others. Refused, reset or a failed TLS handshake is ``connection_error``;
no answer within the probe's timeout (connecting included) is ``timeout``; bytes that
are not the protocol are ``http_error``/``grpc_error``. A connection the server ended
while idle is replaced, not counted as a failure; after a failed check the next one
connects anew.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import time
from collections.abc import Callable
from typing import Generic, TypeVar
from urllib.parse import urlsplit

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.kserve import GRPC_SERVER_READY
from tritonwatch.config.schema import TargetConfig
from tritonwatch.probe.interfaces import ReadinessProbe
from tritonwatch.records.observations import Outcome, ReadinessObservation
from tritonwatch.wire.errors import HttpProtocolError
from tritonwatch.wire.grpc_codes import DEADLINE_EXCEEDED, UNAVAILABLE
from tritonwatch.wire.http1 import Http1Connection
from tritonwatch.wire.http2 import ClientSession, GrpcReply, UnaryRequest, grpc_unary_request
from tritonwatch.wire.kserve_protobuf import ProtobufDecodeError, decode_server_ready_response

Clock = Callable[[], float]
Answer = TypeVar("Answer")
Request = TypeVar("Request")
READ_SIZE = 65536
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def _left(deadline: float) -> float:
    """Seconds to ``deadline``. Raises :class:`TimeoutError` when none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the probe's timeout passed")
    return left


class _Probe(Generic[Request]):
    """What both probes share: the socket kept between checks (TLS around it when the
    target is secure), the timeout, the observation."""

    _alpn: tuple[str, ...] = ()

    def __init__(
        self,
        target: str,
        url: str,
        timeout: float,
        clock: Clock = time.monotonic,
        tls: ClientTLS | None = None,
    ):
        parts = urlsplit(url)
        secure = tls_for(url, tls)
        self._target, self._timeout, self._clock = target, timeout, clock
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if secure is not None else 80)
        self._tls = None if secure is None else secure.ssl_context(self._alpn)
        self.socket: socket.socket | None = None
        self._request = self._encode(parts.path.rstrip("/"), parts.netloc.rpartition("@")[2])
        self._fresh()

    def check(self) -> ReadinessObservation:
        started = self._clock()
        try:
            outcome, error = self._call(time.monotonic() + self._timeout)
        except TimeoutError as failure:  # (before OSError: it is one)
            self.close()
            outcome, error = Outcome.TIMEOUT, f"no answer in time: {failure}"
        except OSError as failure:
            self.close()
            outcome, error = Outcome.CONNECTION_ERROR, _root_cause(failure)
        except HttpProtocolError as failure:
            self.close()
            outcome, error = self._not_protocol(failure)
        now = self._clock()
        ready = outcome == Outcome.SUCCESS
        return ReadinessObservation(self._target, now, outcome, ready, now - started, error)

    def _call(self, deadline: float) -> tuple[Outcome, str]:
        """One readiness call: on the kept connection while it can take one, and once
        more on a new one if the server closed the kept one as the call went out."""
        if self.socket is not None and self._reusable(self.socket):
            try:
                return self._ask(deadline)
            except ConnectionError:
                pass  # closed by the server between its last answer and this call
        self._connect(deadline)
        return self._ask(deadline)

    def _reusable(self, sock: socket.socket) -> bool:
        """Whether the kept socket can carry the next call: what came on it while idle
        (read without waiting, handed to :meth:`_idle`) did not end it."""
        try:
            pending = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
            if not pending and not select.select([sock], [], [], 0)[0]:
                return True
            sock.setblocking(False)
            try:
                data = sock.recv(READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError):
                return True  # a TLS record without data for us (a session ticket)
            return bool(data) and self._idle(data)
        except (OSError, HttpProtocolError):
            return False

    def _connect(self, deadline: float) -> None:
        """A new connection (the TLS handshake done) within ``deadline``, and the
        protocol's state for it. Raises OSError: refused, unreachable, timed out, or
        the handshake failed."""
        self.close()
        sock = socket.create_connection((self._host, self._port), timeout=_left(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock.settimeout(_left(deadline))
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise
        self.socket = sock
        self._fresh()

    def _exchange(
        self, request: bytes, read: Callable[[bytes], tuple[Answer | None, bytes]], deadline: float
    ) -> Answer:
        """Sends ``request`` and feeds every read to ``read`` (the answer once whole, and
        bytes owed to the server, sent at once) until it gives the answer.

        Raises:
            TimeoutError: ``deadline`` passed first.
            ConnectionError: the server closed the connection first.
            OSError: the socket failed (a TLS error included).
        """
        sock = self.socket
        assert sock is not None
        sock.settimeout(_left(deadline))
        sock.sendall(request)
        while True:
            sock.settimeout(_left(deadline))
            data = sock.recv(READ_SIZE)
            if not data:
                raise ConnectionResetError("connection closed by the server")
            answer, owed = read(data)
            if owed:
                sock.sendall(owed)
            if answer is not None:
                return answer

    def _idle(self, data: bytes) -> bool:
        """Whether the connection stays usable after ``data`` came while it idled."""
        return False

    def _encode(self, path: str, authority: str) -> Request:
        """The request, built once from the URL's path prefix and its ``host:port``."""
        raise NotImplementedError

    def _fresh(self) -> None:
        """Starts the protocol's state for a new connection."""
        raise NotImplementedError

    def _ask(self, deadline: float) -> tuple[Outcome, str]:
        """The call on the current connection, judged."""
        raise NotImplementedError

    def _not_protocol(self, error: HttpProtocolError) -> tuple[Outcome, str]:
        """The outcome of an answer that is not the protocol."""
        raise NotImplementedError

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
            self.socket = None


class HttpReadinessProbe(_Probe[bytes]):
    """``GET {url}/v2/health/ready``: 200 means ready, anything else means not (HTTP/1.1
    sends nothing unasked: bytes on an idle connection end it)."""

    def _encode(self, path: str, authority: str) -> bytes:
        return f"GET {path}/v2/health/ready HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()

    def _fresh(self) -> None:
        self._reader = Http1Connection()

    def _ask(self, deadline: float) -> tuple[Outcome, str]:
        reader = self._reader
        status, _ = self._exchange(self._request, lambda data: (reader.feed(data), b""), deadline)
        return (Outcome.SUCCESS, "") if status == 200 else (Outcome.HTTP_ERROR, f"HTTP {status}")

    def _not_protocol(self, error: HttpProtocolError) -> tuple[Outcome, str]:
        return Outcome.HTTP_ERROR, f"not HTTP/1.1: {error}"


class GrpcReadinessProbe(_Probe[UnaryRequest]):
    """``ServerReady`` on one HTTP/2 connection: ready, not ready, or why no answer came."""

    _alpn = ("h2",)

    def _encode(self, path: str, authority: str) -> UnaryRequest:
        return grpc_unary_request(authority, GRPC_SERVER_READY, b"", self._timeout)

    def _reusable(self, sock: socket.socket) -> bool:
        return super()._reusable(sock) and self._session.can_send(self._request)

    def _idle(self, data: bytes) -> bool:
        """Frames that came between checks (PING, SETTINGS, WINDOW_UPDATE, GOAWAY) are
        read (what they owe the server goes out ahead of the next call); the connection
        stays usable unless the server went away."""
        self._session.feed(data)
        return not self._session.going_away

    def _fresh(self) -> None:
        self._session = ClientSession()

    def _ask(self, deadline: float) -> tuple[Outcome, str]:
        session = self._session

        def read(data: bytes) -> tuple[GrpcReply | None, bytes]:
            return session.feed(data), session.take_output()

        return _judged(self._exchange(session.start(self._request), read, deadline))

    def _not_protocol(self, error: HttpProtocolError) -> tuple[Outcome, str]:
        return Outcome.GRPC_ERROR, f"not gRPC: {error}"


def _root_cause(error: OSError) -> str:
    """``Connection refused`` rather than ``[Errno 111] Connection refused``; a TLS
    error's own text; the error's type when it says nothing."""
    text = str(error)
    match = _ERRNO_TEXT.search(text)
    return match.group(1).strip() if match else text[:200] or type(error).__name__


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


def readiness_probe_for(target: TargetConfig, timeout: float) -> ReadinessProbe:
    """The probe that speaks the protocol of ``target.url``, with its TLS when secure."""
    probe = GrpcReadinessProbe if target.protocol == "grpc" else HttpReadinessProbe
    return probe(target.name, target.url, timeout, tls=target.client_tls)
