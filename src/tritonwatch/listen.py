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
    if not separator or not port_text.isdigit():
        raise ListenAddressError("must be host:port, e.g. 127.0.0.1:9849")
    port = int(port_text)
    if port > 65535:
        raise ListenAddressError("port must be between 0 and 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return ListenAddress(host or "0.0.0.0", port)
