"""The exporter-toolkit ``web-config`` file: TLS and basic auth for the exporter.

Prometheus exporters share one file format for securing their endpoint
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md);
accepting the same file lets users reuse what they already run for node_exporter and
the Prometheus scrape configs that go with it. Relative file names inside it are
relative to its own folder, as exporter-toolkit does.

Settings tritonwatch cannot honour are rejected by name rather than ignored: a
security setting that is silently dropped (``client_allowed_sans``, say) would leave
the endpoint more open than its owner believes.

This module reads and checks the file (schema, users, certificates and keys), so
``check-config`` can refuse a bad one without starting a server;
:mod:`tritonwatch.export.web_config_watcher` keeps the exporter's copy current.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tritonwatch.config.errors import ConfigError, Problem, problems_from_validation
from tritonwatch.config.strict_yaml import read_mapping  # the same YAML rules as the config

TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH_TYPES: dict[str, ssl.VerifyMode] = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_BCRYPT_HASH = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")

_REMOVE_IT = "is not supported by tritonwatch; remove it"
_UNSUPPORTED_TOP = {
    "http_server_config": f"{_REMOVE_IT} (the exporter speaks HTTP/1.1 and adds no headers)",
    "rate_limit": _REMOVE_IT,
}
_UNSUPPORTED_TLS = {
    "cert": "inline PEM is not supported by tritonwatch; put it in a file named by cert_file",
    "key": "inline PEM is not supported by tritonwatch; put it in a file named by key_file",
    "client_ca": (
        "inline PEM is not supported by tritonwatch; put it in a file named by client_ca_file"
    ),
    "cipher_suites": f"{_REMOVE_IT} (OpenSSL's default ciphers apply)",
    "curve_preferences": f"{_REMOVE_IT} (OpenSSL's default curves apply)",
    "prefer_server_cipher_suites": f"{_REMOVE_IT} (OpenSSL's default applies)",
    "client_allowed_sans": (
        f"{_REMOVE_IT}; restrict clients with a client CA that signs only their certificates"
    ),
}
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
_OLD_TLS_VERSIONS = ("TLS10", "TLS11")

TLSVersionName = Literal["TLS12", "TLS13"]
ClientAuthName = Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]


@dataclass(frozen=True, slots=True)
class BasicAuthUser:
    """One ``basic_auth_users`` entry; the hash is left out of ``repr`` and logs."""

    name: str
    password_hash: bytes = field(repr=False)


class WebConfigError(ConfigError):
    """A web-config file that cannot be used; ``str()`` is one line per problem,
    each naming the file, the field path and (unless it may be a secret) the value."""


class _EncryptedKeyError(Exception):
    """Raised instead of letting OpenSSL prompt for a passphrase on the terminal."""


def _refuse_passphrase() -> bytes:
    raise _EncryptedKeyError


class _TLSDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cert_file: str = Field(min_length=1)
    key_file: str = Field(min_length=1)
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName = "TLS13"
    client_auth_type: ClientAuthName = "NoClientCert"
    client_ca_file: str | None = Field(default=None, min_length=1)


class _Document(BaseModel):
    """The file's shape; ``basic_auth_users`` is checked by hand so hashes are never echoed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tls_server_config: _TLSDocument | None = None
    basic_auth_users: Any = None


@dataclass(frozen=True, slots=True)
class TLSServerSettings:
    """The ``tls_server_config`` section, file names already joined with the file's folder."""

    cert_file: Path
    key_file: Path
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    client_auth: ssl.VerifyMode = ssl.CERT_NONE
    client_ca_file: Path | None = None

    def files(self) -> tuple[Path, ...]:
        """The files the TLS settings read; a change to any of them means new certificates."""
        named = (self.cert_file, self.key_file, self.client_ca_file)
        return tuple(path for path in named if path is not None)

    def server_context(self) -> ssl.SSLContext:
        """A fresh server-side context honouring the versions and the client-auth policy.

        Raises:
            ssl.SSLError, OSError: a file is unreadable or not what it should be.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = self.min_version
        context.maximum_version = self.max_version
        context.load_cert_chain(self.cert_file, self.key_file, password=_refuse_passphrase)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
        context.verify_mode = self.client_auth
        return context


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A validated web-config file: TLS settings (None: plain HTTP) and basic-auth users
    (empty: no authentication)."""

    source: Path
    tls: TLSServerSettings | None = None
    users: tuple[BasicAuthUser, ...] = field(default=(), repr=False)

    def files(self) -> tuple[Path, ...]:
        """The web-config file and every file it names."""
        return (self.source, *(self.tls.files() if self.tls else ()))


def load_web_config(path: str | Path) -> WebConfig:
    """Reads and validates the web-config file at ``path``, certificates and keys included.

    Raises:
        WebConfigError: listing every problem found; the message names the file.
    """
    source = Path(path)
    document = _read_document(source)
    problems = list(_unsupported_problems(document))
    users, user_problems = _users(document.pop("basic_auth_users", None))
    problems += user_problems
    try:
        parsed = _Document.model_validate(document)
    except ValidationError as error:
        problems += problems_from_validation(error, _Document)
        parsed = None
    if problems or parsed is None:
        raise WebConfigError(str(source), problems)
    tls = None
    if parsed.tls_server_config is not None:
        tls = _tls_settings(parsed.tls_server_config, source.parent)
        problems += _tls_problems(parsed.tls_server_config, tls)
    if problems:
        raise WebConfigError(str(source), problems)
    return WebConfig(source, tls, users)


def _read_document(source: Path) -> dict[Any, Any]:
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as error:  # UnicodeEncodeError: a path no file system can name
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise WebConfigError(
            str(source), [Problem("", f"cannot read the file: {reason}")]
        ) from None
    return read_mapping(text, str(source), WebConfigError)


def _unsupported_problems(document: dict[Any, Any]) -> Iterator[Problem]:
    """Names exporter-toolkit settings tritonwatch does not implement, and drops them so
    the schema does not also call them unknown. Values are not shown: ``key`` is a secret."""
    for key, message in _UNSUPPORTED_TOP.items():
        if document.pop(key, None) is not None:
            yield Problem(key, message)
    tls = document.get("tls_server_config")
    if not isinstance(tls, dict):
        return
    for key, message in _UNSUPPORTED_TLS.items():
        if tls.pop(key, None) is not None:
            yield Problem(f"tls_server_config.{key}", message)
    for key in ("min_version", "max_version"):
        if tls.get(key) in _OLD_TLS_VERSIONS:
            yield Problem(
                f"tls_server_config.{key}",
                "is not supported by tritonwatch: Python deprecates TLS 1.0 and 1.1 and "
                "OpenSSL 3 refuses them at its default security level; use TLS12 or TLS13",
                tls.pop(key),
            )
    if tls.get("client_auth_type") in _UNVERIFIED_CLIENT_AUTH:
        yield Problem(
            "tls_server_config.client_auth_type",
            "is not supported by tritonwatch: Python's ssl verifies every client certificate "
            "it accepts; use RequireAndVerifyClientCert with client_ca_file",
            tls.pop("client_auth_type"),
        )


def _users(section: object) -> tuple[tuple[BasicAuthUser, ...], list[Problem]]:
    """Validates ``basic_auth_users`` without ever putting a hash (or a password pasted
    where the hash belongs) into a message."""
    if section is None:
        return (), []
    if not isinstance(section, dict):
        return (), [Problem("basic_auth_users", "must be a mapping of user name to bcrypt hash")]
    users: list[BasicAuthUser] = []
    problems: list[Problem] = []
    for name, password_hash in section.items():
        problem = _user_problem(name, password_hash)
        if problem is not None:
            problems.append(problem)
        else:
            users.append(BasicAuthUser(name, _normalised_hash(password_hash)))
    return tuple(users), problems


def _user_problem(name: object, password_hash: object) -> Problem | None:
    if not isinstance(name, str) or not name:
        return Problem("basic_auth_users", "user names must be non-empty text", name)
    where = f"basic_auth_users.{name if name.isprintable() else repr(name)}"
    if ":" in name:
        return Problem(where, "user names must not contain ':' (basic auth splits on it)")
    if not isinstance(password_hash, str) or not _BCRYPT_HASH.match(password_hash):
        return Problem(
            where,
            "must be a bcrypt hash ($2a$, $2b$ or $2y$, cost 04-31, 60 characters); "
            "the value is not shown in case it is a password",
        )
    return None


def _normalised_hash(password_hash: str) -> bytes:
    """``$2y$`` (htpasswd, PHP) and ``$2b$`` are the same algorithm; the bcrypt package
    has not always accepted the former, so it is stored as the latter."""
    if password_hash.startswith("$2y$"):
        password_hash = "$2b$" + password_hash[4:]
    return password_hash.encode("ascii")


def _tls_settings(written: _TLSDocument, folder: Path) -> TLSServerSettings:
    def joined(name: str) -> Path:
        return folder / Path(name).expanduser()  # an absolute name replaces the folder

    return TLSServerSettings(
        cert_file=joined(written.cert_file),
        key_file=joined(written.key_file),
        min_version=TLS_VERSIONS[written.min_version],
        max_version=TLS_VERSIONS[written.max_version],
        client_auth=CLIENT_AUTH_TYPES[written.client_auth_type],
        client_ca_file=joined(written.client_ca_file) if written.client_ca_file else None,
    )


def _tls_problems(written: _TLSDocument, tls: TLSServerSettings) -> list[Problem]:
    """Cross-field rules first, then the files themselves, each problem on its own field."""
    problems = list(_tls_policy_problems(written))
    if problems:
        return problems
    files = [
        ("cert_file", written.cert_file, tls.cert_file),
        ("key_file", written.key_file, tls.key_file),
    ]
    if written.client_ca_file is not None and tls.client_ca_file is not None:
        files.append(("client_ca_file", written.client_ca_file, tls.client_ca_file))
    problems = [p for name, raw, path in files if (p := _unreadable(name, raw, path)) is not None]
    if problems:
        return problems
    return list(_pem_problems(written, tls))


def _tls_policy_problems(written: _TLSDocument) -> Iterator[Problem]:
    if TLS_VERSIONS[written.min_version] > TLS_VERSIONS[written.max_version]:
        yield Problem(
            "tls_server_config.min_version",
            f"must not be above max_version ({written.max_version})",
            written.min_version,
        )
    verifies = written.client_auth_type != "NoClientCert"
    if written.client_ca_file is not None and not verifies:
        yield Problem(
            "tls_server_config.client_auth_type",
            "must be RequireAndVerifyClientCert or VerifyClientCertIfGiven when "
            "client_ca_file is set",
            written.client_auth_type,
        )
    if verifies and written.client_ca_file is None:
        yield Problem(
            "tls_server_config.client_ca_file",
            f"is required when client_auth_type is {written.client_auth_type}",
        )


def _unreadable(name: str, raw: str, path: Path) -> Problem | None:
    try:
        path.read_bytes()
    except OSError as error:
        reason = error.strerror or str(error)
        return Problem(f"tls_server_config.{name}", f"cannot read {path}: {reason}", raw)
    return None


def _pem_problems(written: _TLSDocument, tls: TLSServerSettings) -> Iterator[Problem]:
    """Loads each file the way the server will, so a bad one is found at load, not at the
    first scrape, and blamed on the right field."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=tls.cert_file)
    except ssl.SSLError:
        yield Problem(
            "tls_server_config.cert_file", "must hold a PEM certificate", written.cert_file
        )
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            tls.cert_file, tls.key_file, password=_refuse_passphrase
        )
    except _EncryptedKeyError:
        yield Problem("tls_server_config.key_file", "must not be encrypted", written.key_file)
        return
    except ssl.SSLError as error:
        yield Problem("tls_server_config.key_file", _key_message(error), written.key_file)
        return
    if tls.client_ca_file is not None:
        try:
            probe.load_verify_locations(cafile=tls.client_ca_file)
        except ssl.SSLError:
            yield Problem(
                "tls_server_config.client_ca_file",
                "must hold PEM CA certificates",
                written.client_ca_file,
            )


def _key_message(error: ssl.SSLError) -> str:
    if error.reason == "KEY_VALUES_MISMATCH":
        return "must hold the private key of the certificate in cert_file, but does not match it"
    return "must hold a PEM private key"
