"""``host:port`` listen addresses, as Prometheus exporters write them."""

from __future__ import annotations

from typing import NamedTuple


class ListenAddressError(ValueError):
    """A listen address that cannot be bound."""


class ListenAddress(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen_address(text: str) -> ListenAddress:
    """Parses ``127.0.0.1:9849``, ``[::1]:9849`` or ``:9849`` (all interfaces).

    Raises:
        ListenAddressError: naming the accepted form.
    """
    host, separator, port_text = text.rpartition(":")
    # isdigit() alone also accepts "²" and other digits int() refuses.
    if not separator or not (port_text.isascii() and port_text.isdigit()):
        raise ListenAddressError("must be host:port, e.g. 127.0.0.1:9849")
    # int() refuses more than 4300 digits; any port that long is out of range anyway.
    port = int(port_text) if len(port_text.lstrip("0")) <= 5 else 65536
    if port > 65535:
        raise ListenAddressError("port must be between 0 and 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return ListenAddress(host or "0.0.0.0", port)
