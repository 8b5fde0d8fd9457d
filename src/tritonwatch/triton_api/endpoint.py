"""Where a server's model APIs are asked, and over which protocol.

A target configured by its gRPC endpoint (``url: grpc://…``, no ``http_url``) may have
no reachable HTTP port at all — the port Triton would use on that host is only a guess
(``effective_http_url``), and deployments that expose gRPC alone are common. So such a
target is asked over gRPC, and every other target over HTTP: :func:`api_endpoint` is
that rule, for the scrapers, discovery and the canary alike. ``/metrics`` stays HTTP
either way: Triton serves it nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.config.schema import TargetConfig

ApiProtocol = Literal["http", "grpc"]


@dataclass(frozen=True, slots=True)
class ApiEndpoint:
    """A server's model APIs: ``url`` (a scheme, ``host:port``, for HTTP maybe a path
    prefix), the ``protocol`` they are asked in, and the TLS settings (used for a secure
    scheme only; a secure scheme without them gets the system's CAs)."""

    url: str
    protocol: ApiProtocol = "http"
    tls: ClientTLS | None = None

    @property
    def secure_tls(self) -> ClientTLS | None:
        """The TLS to use: None for ``http://`` and ``grpc://``."""
        return tls_for(self.url, self.tls)

    @property
    def address(self) -> str:
        """``host:port`` (what a gRPC channel dials)."""
        return self.url.partition("://")[2].rstrip("/")

    @property
    def http_base(self) -> str:
        """The URL HTTP paths are appended to: ``url`` itself when it is HTTP, else its
        address under ``http(s)://`` (secure when ``url`` is)."""
        scheme = self.url.partition("://")[0].lower()
        if scheme in ("http", "https"):
            return self.url.rstrip("/")
        return f"{'https' if self.secure_tls is not None else 'http'}://{self.address}"


def api_endpoint(
    http_url: str, grpc_url: str, tls: ClientTLS | None = None, *, grpc_only: bool = False
) -> ApiEndpoint:
    """gRPC at ``grpc_url`` for a ``grpc_only`` target (configured by its gRPC URL, no
    ``http_url``); HTTP at ``http_url`` for every other."""
    if grpc_only:
        return ApiEndpoint(grpc_url, "grpc", tls)
    return ApiEndpoint(http_url, "http", tls)


def target_endpoint(target: TargetConfig) -> ApiEndpoint:
    """:func:`api_endpoint` for a configured target."""
    return api_endpoint(
        target.effective_http_url,
        target.effective_grpc_url,
        target.client_tls,
        grpc_only=target.grpc_only,
    )


def url_endpoint(url: str, tls: ClientTLS | None = None) -> ApiEndpoint:
    """One URL's own protocol: gRPC for ``grpc(s)://``, HTTP otherwise (``tune``'s
    ``--url``)."""
    return ApiEndpoint(url, "grpc" if url.lower().startswith("grpc") else "http", tls)


def protocol_endpoint(protocol: str, url: str, tls: ClientTLS | None = None) -> ApiEndpoint:
    """``url`` asked in ``protocol``: gRPC for ``"grpc"``, HTTP for any other (a sweep
    whose ``--protocol`` says other than its URL's scheme)."""
    return ApiEndpoint(url, "grpc" if protocol == "grpc" else "http", tls)
