"""Test PKI made with the real ``openssl`` CLI, and a TLS-terminating proxy.

Triton serves HTTP (and ``/metrics``) without TLS of its own: deployments put nginx or
Envoy in front. :class:`TlsProxy` plays that part for the simulator, optionally asking
for client certificates (mutual TLS) and speaking ALPN ``h2`` so gRPC can pass too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate,
    plus a second, unrelated CA for negative tests."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return cert, key


def _signed(folder: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr = folder / f"{name}.crt", folder / f"{name}.key", folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    return cert, key


def make_pki(folder: Path) -> Pki:
    """Writes a fresh PKI under ``folder`` (about a second of openssl)."""
    ca = _ca(folder, "test-ca")
    server = _signed(folder, "server", ca,
                     "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                     "extendedKeyUsage=serverAuth\n")  # fmt: skip
    client = _signed(folder, "client", ca, "extendedKeyUsage=clientAuth\n")
    other = _ca(folder, "other-ca")
    return Pki(ca[0], server[0], server[1], client[0], client[1], other[0])


class TlsProxy:
    """Accepts TLS on 127.0.0.1 and forwards the plain bytes to ``upstream_port``.

    With ``client_ca`` set, clients must present a certificate signed by it.
    """

    def __init__(self, upstream_port: int, pki: Pki, *, mutual: bool = False) -> None:
        self._upstream = upstream_port
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.server_cert, pki.server_key)
        context.set_alpn_protocols(["h2", "http/1.1"])
        if mutual:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(pki.ca)
        self._context = context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.port = future.result(timeout=10)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def base(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in self._writers:
            writer.transport.abort()  # closes the socket now, not at garbage collection
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
