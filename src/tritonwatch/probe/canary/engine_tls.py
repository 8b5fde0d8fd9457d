"""TLS spoken by the canary engine's ``select()`` thread, around any of its wires.

``ssl`` on a non-blocking socket wants an event loop to drive its handshake; the
engine has none, so it keeps the socket plain and lets OpenSSL work on memory instead
(``ssl.MemoryBIO`` and :meth:`ssl.SSLContext.wrap_bio`): what the socket reads goes in
one buffer, what OpenSSL wants sent comes out of the other, and the engine moves the
bytes as it moves a plaintext wire's. :class:`TlsWire` is such a wire wrapped around
another (HTTP/1.1, a gRPC HTTP/2 session, a streaming wire), so every protocol the
engine speaks in clear it speaks over TLS too, with the same answers, the same reuse
of keep-alive connections and the same kernel arrival stamps: the read that carried
an answer's last record is the read whose stamp ends its latency.

Over the wire protocol the engine already knows (:class:`Wire
<tritonwatch.probe.canary.engine_wires.Wire>`):

* ``start()`` on a fresh connection is the ClientHello; the inner wire's request waits
  in the clear until the handshake is done and goes out then, through
  ``take_output()``, the way an HTTP/2 acknowledgement does: after each ``feed()`` that
  gave no answer the engine sends what is owed, which carries a handshake through its
  round trips. On a connection in use, ``start()`` is the inner request encrypted.
* ``feed()`` decrypts and hands the plaintext on; records that carry none (TLS 1.3's
  NewSessionTicket after the handshake, a partial record) give no answer.
* ``idle_data()`` reads what came while the connection idled the same way: tickets
  leave it usable, the server's close_notify or a broken record do not.

A failed handshake (an unknown CA, a wrong name, a refused client certificate) raises
:class:`ssl.SSLError`, an ``OSError``: a connection error, as on the event loop.

The context is the event loop's (:meth:`ClientTLS.ssl_context
<tritonwatch.common.client_tls.ClientTLS.ssl_context>`, ALPN ``h2`` added for gRPC) and the
server's name the URL's host, as ``asyncio`` would send and check it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from tritonwatch.probe.canary.engine_stream import StreamAnswer, StreamWire
from tritonwatch.probe.canary.engine_wires import RawAnswer, Wire

READ_SIZE = 256 * 1024
"""The most plaintext taken out of OpenSSL at once (a record is at most 16 KiB)."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """How a target's connections speak TLS: the context (CA, client certificate,
    verification, ALPN) and the name its certificate must carry (also sent as SNI
    unless it is an IP address)."""

    context: ssl.SSLContext
    server_name: str | None

    def wrap(self, inner: Wire) -> TlsWire:
        """A new connection's wire: ``inner`` spoken over TLS (a streaming wire stays
        one, so the engine still reads its streams as streams)."""
        if isinstance(inner, StreamWire):
            return TlsStreamWire(inner, self)
        return TlsWire(inner, self)


class TlsWire:
    """One TLS connection around the wire it carries (see the module docstring)."""

    def __init__(self, inner: Wire, settings: TlsSettings) -> None:
        self._inner = inner
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = settings.context.wrap_bio(
            self._incoming, self._outgoing, server_hostname=settings.server_name
        )
        self._handshaken = False
        self._held = bytearray()
        """Plaintext the inner wire wrote before the handshake was done."""
        self._closed = False
        """The server sent close_notify: nothing more can be said on this connection."""

    @property
    def handshaking(self) -> bool:
        """True until the handshake is done: the connection needs round trips before
        any answer, so its reads cannot wait in the kernel for collection."""
        return not self._handshaken

    @property
    def alpn(self) -> str | None:
        """The application protocol the server chose (None: it chose none)."""
        return self._tls.selected_alpn_protocol()

    def start(self) -> bytes:
        self._send(self._inner.start())
        if not self._handshaken:
            self._handshake()
        return self._outgoing.read()

    def feed(self, data: bytes, received: float) -> RawAnswer | None:
        plain = self._plaintext(data)
        return self._inner.feed(plain, received) if plain else None

    def take_output(self) -> bytes:
        self._send(self._inner.take_output())
        return self._outgoing.read()

    def reusable(self) -> bool:
        return self._handshaken and not self._closed and self._inner.reusable()

    def idle_data(self, data: bytes) -> bool:
        self._incoming.write(data)
        try:
            plain = self._decrypt()
        except ssl.SSLError:
            return False
        if self._closed:
            return False
        return self._inner.idle_data(plain) if plain else True

    def _plaintext(self, data: bytes) -> bytes:
        """What ``data`` (one read of the socket) completes of the server's records, in
        the clear; nothing while the handshake needs more round trips (take_output has
        this step's bytes). Raises ``ssl.SSLError``."""
        self._incoming.write(data)
        if not self._handshaken and not self._handshake():
            return b""
        return self._decrypt()

    def _send(self, plain: bytes) -> None:
        """Encrypts ``plain`` into the outgoing buffer, or holds it for the handshake."""
        if not plain:
            return
        if self._handshaken:
            self._tls.write(plain)
        else:
            self._held += plain

    def _handshake(self) -> bool:
        """Takes the handshake a step on; True once done (the held request is then
        encrypted behind the handshake's last flight). Raises ``ssl.SSLError``."""
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        self._handshaken = True
        held, self._held = bytes(self._held), bytearray()
        self._send(held)
        return True

    def _decrypt(self) -> bytes:
        """Every whole record's plaintext come so far (records without any, such as
        session tickets, give none). Raises ``ssl.SSLError`` for a broken record."""
        pieces: list[bytes] = []
        while not self._closed:
            try:
                piece = self._tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self._closed = True
                break
            if not piece:  # how OpenSSL says the server's close_notify came
                self._closed = True
                break
            pieces.append(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class TlsStreamWire(TlsWire, StreamWire):
    """A streaming wire over TLS: the engine reads its streams as a stream's, and a
    stream it ends keeps the pieces the inner wire read."""

    def __init__(self, inner: StreamWire, settings: TlsSettings) -> None:
        super().__init__(inner, settings)
        self._stream = inner

    def feed(self, data: bytes, received: float) -> StreamAnswer | None:
        """As the inner wire's, except that a broken record raises ``ssl.SSLError``
        (the engine then ends the stream through :meth:`failed`)."""
        plain = self._plaintext(data)
        return self._stream.feed(plain, received) if plain else None

    def failed(self, error: BaseException) -> StreamAnswer:
        return self._stream.failed(error)
