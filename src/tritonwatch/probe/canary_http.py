"""The HTTP canary's infer path: pre-encoded requests on lean HTTP/1.1 keep-alive connections.

aiohttp's request machinery (URL and header objects, the streaming reader, the
connector's bookkeeping) cost the canary about 0.45 ms per request on the test machine
against real Triton, where the same request's bytes on the sweep's lean connection
(:class:`~tritonwatch.probe.load.http1.Http1Connection`) took none of it — a tenth of
a 5 ms model's latency, and most of the canary's gap to perf_analyzer over HTTP.

So each infer is sent as bytes built once (:func:`encode_request`) on a pooled
connection; the answer comes back with the two headers the decoder needs
(``Content-Encoding``, ``Inference-Header-Content-Length``) and nothing is inflated here:
:mod:`~tritonwatch.probe.infer_response` does that once, within its limit. A connection
that did not finish its exchange (timeout, cancellation, error) is dropped, never
reused: a late answer on it would be read as the next request's.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping

from tritonwatch.probe.load.http1 import Http1Connection

_KEPT_HEADERS = ("content-encoding", "inference-header-content-length", "connection")


class HeadedConnection(Http1Connection):
    """:class:`Http1Connection` that also keeps the answer's headers the canary reads."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: dict[str, str] = {}

    def _parse(self) -> tuple[int, bytes] | None:
        end = self._buffer.find(b"\r\n\r\n")
        head = bytes(self._buffer[:end]) if end >= 0 else b""
        parsed = super()._parse()  # consumes the answer from the buffer when complete
        if parsed is not None:
            self.headers = _headers(head)
        return parsed

    @property
    def closed(self) -> bool:
        return self._closed is not None


def _headers(head: bytes) -> dict[str, str]:
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in _KEPT_HEADERS:
            headers[name] = value.strip()
    return headers


def encode_request(
    method: str, host: str, path: str, body: bytes, headers: Mapping[str, str]
) -> bytes:
    """A complete keep-alive HTTP/1.1 request for ``path`` on ``host`` (as
    ``host:port``), with ``headers`` added; a POST says its body's length."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        "Connection: keep-alive",
        *([f"Content-Length: {len(body)}"] if method == "POST" else []),
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ConnectionPool:
    """Idle keep-alive connections to one server; one exchange at a time on each."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, limit: int) -> None:
        self._host, self._port, self._tls = host, port, tls
        self._idle: list[HeadedConnection] = []
        self._slots = asyncio.Semaphore(limit)
        """At most ``limit`` exchanges (so connections) at once; the rest wait."""

    async def exchange(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """Sends ``request`` and returns the status, kept headers and body (as sent)."""
        async with self._slots:
            connection = await self._connection()
            done = False
            try:
                status, body = await connection.request(request)
                done = True
            finally:
                keep = done and not connection.closed
                if keep and connection.headers.get("connection", "").lower() != "close":
                    self._idle.append(connection)
                else:
                    connection.close()
            return status, connection.headers, body

    async def _connection(self) -> HeadedConnection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:  # the server may have closed it while it idled
                return connection
        _, protocol = await asyncio.get_running_loop().create_connection(
            HeadedConnection, self._host, self._port, ssl=self._tls
        )
        return protocol

    def close_idle(self) -> None:
        """Closes the connections no exchange is using (the pool stays usable)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
