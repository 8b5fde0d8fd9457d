"""TLS toward Triton: one description, translated for every client library we use.

A target behind TLS is reached by several different clients (``requests`` for the model
APIs, scrapes and readiness, the canary's and the sweep's own HTTP/1.1 and HTTP/2
connections, ``tritonclient.grpc`` and ``grpc`` channels for gRPC-only targets and the
library paths), and each spells "trust this CA, present this certificate" differently.
Keeping the translation here means a target's ``tls`` section means the same thing to
all of them, and a new client cannot forget the client certificate.

The settings hold paths only (picklable: sweep workers run in other processes); files
are read when a client is built, so a renewed certificate is picked up by the next
client without a restart.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter

SECURE_SCHEMES = frozenset({"https", "grpcs"})


def is_secure(url: str) -> bool:
    """True for ``https://`` and ``grpcs://`` URLs."""
    return url.partition("://")[0].lower() in SECURE_SCHEMES


@dataclass(frozen=True, slots=True)
class FileProblem:
    """One reason :class:`ClientTLS` cannot be used: ``field`` (``ca_file``,
    ``cert_file`` or ``key_file``) is required because ``given_without_it`` is set, or
    names a file that does not exist (``not_found``)."""

    field: str
    given_without_it: str | None = None
    not_found: Path | None = None


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """How to verify a Triton server and, for mutual TLS, who we are.

    ``ca_file`` None trusts the system's CAs; ``cert_file``/``key_file`` (both or
    neither) are presented when the server asks for a client certificate.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def file_problems(self) -> Iterator[FileProblem]:
        """What makes these settings unusable, for the config check and the CLI flags
        to word in their own terms: a certificate without its key (or the reverse),
        then each named file that does not exist."""
        if (self.cert_file is None) != (self.key_file is None):
            missing, given = (
                ("key_file", "cert_file") if self.key_file is None else ("cert_file", "key_file")
            )
            yield FileProblem(missing, given_without_it=given)
        for name in ("ca_file", "cert_file", "key_file"):
            path: Path | None = getattr(self, name)
            if path is not None and not path.is_file():
                yield FileProblem(name, not_found=path)

    def ssl_context(self, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
        """A verifying client context (hostname checked) for asyncio streams and the
        canary engine's sockets; ``alpn``: the application protocols offered (``h2``
        for gRPC over the engine's HTTP/2, as gRPC's own TLS offers it)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file is not None and self.key_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        if alpn:
            context.set_alpn_protocols(list(alpn))
        return context

    def requests_options(self) -> dict[str, Any]:
        """``verify``/``cert`` for a ``requests`` call or session."""
        options: dict[str, Any] = {}
        if self.ca_file is not None:
            options["verify"] = str(self.ca_file)
        if self.cert_file is not None and self.key_file is not None:
            options["cert"] = (str(self.cert_file), str(self.key_file))
        return options

    def configure_session(self, session: requests.Session) -> None:
        """Makes every ``https://`` request of ``session`` use these settings.

        Not through ``session.verify``: requests lets ``REQUESTS_CA_BUNDLE`` and
        ``CURL_CA_BUNDLE`` (set in many base images) override a session's CA, so the
        configured CA would silently be ignored. An adapter sees every request last.
        """
        session.mount("https://", _TLSAdapter(self.requests_options()))

    def tritonclient_grpc_options(self) -> dict[str, Any]:
        """Keyword arguments for ``tritonclient.grpc`` clients (sync and aio), which
        take the PEM files' paths and read them themselves."""
        options: dict[str, Any] = {"ssl": True}
        if self.ca_file is not None:
            options["root_certificates"] = str(self.ca_file)
        if self.cert_file is not None and self.key_file is not None:
            options["private_key"] = str(self.key_file)
            options["certificate_chain"] = str(self.cert_file)
        return options

    def grpc_credentials(self) -> Any:
        """``grpc.ssl_channel_credentials`` for channels we open ourselves."""
        import grpc  # noqa: PLC0415 - heavy; load on use

        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )


class _TLSAdapter(HTTPAdapter):
    """Sends with fixed ``verify``/``cert``, whatever the environment says."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__()
        self._options = options

    def send(self, request: PreparedRequest, **kwargs: Any) -> Response:  # type: ignore[override]
        kwargs.update(self._options)
        return super().send(request, **kwargs)


DEFAULT_TLS = ClientTLS()
"""The system's CAs and no client certificate: what a bare ``https://`` URL gets."""


def tls_for(url: str, tls: ClientTLS | None) -> ClientTLS | None:
    """The TLS settings to use for ``url``: None for plain schemes, else ``tls`` or the
    defaults (a secure URL is never sent in clear because no ``tls`` was configured)."""
    if not is_secure(url):
        return None
    return tls if tls is not None else DEFAULT_TLS
