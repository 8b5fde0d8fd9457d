"""The exporter-toolkit web-config: basic auth, TLS, client certificates, exact errors.

Every server here is the real exporter on a free 127.0.0.1 port; certificates come from
a throwaway CA made with the ``openssl`` CLI; hashes use bcrypt cost 4 to stay fast.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import ssl
import subprocess
import textwrap
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge

from support import TRITONWATCH, DaemonProcess, free_port, wait_until
from tritonwatch.commands.cli import main
from tritonwatch.common.listen import ListenAddress
from tritonwatch.config import ConfigError, parse_config
from tritonwatch.config.web_config import BasicAuthUser, WebConfigError, load_web_config
from tritonwatch.export.basic_auth import BasicAuthChecker
from tritonwatch.export.http_server import ExporterServer, HealthReport, exporter_app

pytestmark = pytest.mark.real

EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
LEAF = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nauthorityKeyIdentifier=keyid,issuer\n"
SERVER_EXT = LEAF + "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
CLIENT_EXT = LEAF + "extendedKeyUsage=clientAuth\n"
WWW_AUTHENTICATE = 'Basic realm="tritonwatch"'


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> None:
    _openssl(folder, "req", "-x509", *EC_KEY, "-days", "1", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.crt")  # fmt: skip


def _leaf(folder: Path, name: str, ca: str, extensions: str) -> None:
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(folder, "req", "-new", *EC_KEY, "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
    _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", "1",
             "-extfile", f"{name}.ext", "-out", f"{name}.crt")  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """server-ca signs the server (IP:127.0.0.1) and a stranger client; client-ca signs
    the one client the server should let in."""
    folder = tmp_path_factory.mktemp("pki")
    _ca(folder, "server-ca")
    _ca(folder, "client-ca")
    _leaf(folder, "server", "server-ca", SERVER_EXT)
    _leaf(folder, "client", "client-ca", CLIENT_EXT)
    _leaf(folder, "stranger", "server-ca", CLIENT_EXT)
    _openssl(folder, "ec", "-in", "server.key", "-aes128", "-passout", "pass:secret",
             "-out", "server-encrypted.key")  # fmt: skip
    return folder


def _hash(password: str, prefix: str = "$2b$") -> str:
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    return prefix + hashed[4:]


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@contextmanager
def _serving(web_config: Path, **kwargs: Any) -> Iterator[ExporterServer]:
    registry = CollectorRegistry()
    Gauge("tritonwatch_test_value", "A test gauge.", registry=registry).set(42)
    app = exporter_app(registry, lambda: HealthReport(True, {"status": "healthy"}))
    server = ExporterServer(
        ListenAddress("127.0.0.1", 0), app, web_config_file=web_config, **kwargs
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _get(url: str, **kwargs: Any) -> requests.Response:
    with requests.Session() as session:
        session.trust_env = False  # no proxy from the environment for 127.0.0.1
        return session.get(url, timeout=5, **kwargs)


# --- basic auth -------------------------------------------------------------------


def test_basic_auth_guards_every_route(tmp_path: Path) -> None:
    """Basic auth guards every route with a 401 challenge, and lets the right user through."""
    web = _write(tmp_path / "web.yml", f"basic_auth_users: {{alice: '{_hash('wonderland')}'}}\n")
    with _serving(web) as server:
        assert server.scheme == "http"
        base = f"http://{server.address}"
        for path in ("/metrics", "/health", "/", "/nope"):
            refused = _get(base + path)
            assert refused.status_code == 401, path
            assert refused.headers["WWW-Authenticate"] == WWW_AUTHENTICATE
            assert refused.json() == {"error": "unauthorized"}
        scraped = _get(f"{base}/metrics", auth=("alice", "wonderland"))
        assert scraped.status_code == 200
        assert "tritonwatch_test_value 42.0" in scraped.text
        health = _get(f"{base}/health", auth=("alice", "wonderland"))
        assert health.json() == {"status": "healthy"}
        assert _get(f"{base}/", auth=("alice", "wonderland")).status_code == 200
        assert _get(f"{base}/nope", auth=("alice", "wonderland")).status_code == 404


@pytest.mark.parametrize(
    "authorization",
    [
        "Basic " + base64.b64encode(b"alice:looking-glass").decode(),  # wrong password
        "Basic " + base64.b64encode(b"bob:wonderland").decode(),  # unknown user
        "Basic " + base64.b64encode(b"Alice:wonderland").decode(),  # names are exact
        "Basic " + base64.b64encode(b"alice").decode(),  # no colon
        "Basic !!not base64!!",
        "Bearer " + base64.b64encode(b"alice:wonderland").decode(),  # wrong scheme
        "Basic",
    ],
)
def test_wrong_or_garbled_credentials_get_401(tmp_path: Path, authorization: str) -> None:
    """Wrong, unknown, miscased or garbled credentials get 401 and no metrics."""
    web = _write(tmp_path / "web.yml", f"basic_auth_users: {{alice: '{_hash('wonderland')}'}}\n")
    with _serving(web) as server:
        url = f"http://{server.address}/metrics"
        refused = _get(url, headers={"Authorization": authorization})
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"] == WWW_AUTHENTICATE
        assert "tritonwatch_test_value" not in refused.text
        assert _get(url, auth=("alice", "wonderland")).status_code == 200


def test_htpasswd_style_2y_hashes_and_several_users(tmp_path: Path) -> None:
    """$2y$ and $2a$ hashes work, each user with their own password only."""
    web = _write(
        tmp_path / "web.yml",
        f"""\
        basic_auth_users:
          alice: '{_hash("wonderland", prefix="$2y$")}'
          bob: '{_hash("builder", prefix="$2a$")}'
        """,
    )
    with _serving(web) as server:
        url = f"http://{server.address}/metrics"
        assert _get(url, auth=("alice", "wonderland")).status_code == 200
        assert _get(url, auth=("bob", "builder")).status_code == 200
        assert _get(url, auth=("alice", "builder")).status_code == 401
        assert _get(url, auth=("bob", "wonderland")).status_code == 401


def test_success_is_remembered_failures_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each scrape must not pay bcrypt again; each guess must."""
    real_checkpw = bcrypt.checkpw
    calls: list[bytes] = []

    def counting_checkpw(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real_checkpw(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting_checkpw)
    alice = BasicAuthUser("alice", _hash("wonderland").encode())
    checker = BasicAuthChecker((alice,))
    assert checker.check(b"alice", b"wonderland") is True
    assert checker.check(b"alice", b"wonderland") is True
    assert len(calls) == 1
    assert checker.check(b"alice", b"wrong") is False
    assert checker.check(b"alice", b"wrong") is False
    assert len(calls) == 3
    # An unknown user is still checked against a real hash, so it takes as long.
    assert checker.check(b"mallory", b"wonderland") is False
    assert calls[-1] == alice.password_hash
    assert len(calls) == 4
    # A different checker (a reloaded file) has its own memory.
    assert BasicAuthChecker((alice,)).check(b"alice", b"wonderland") is True
    assert len(calls) == 5


def test_passwords_past_72_bytes_count_only_their_first_72() -> None:
    """bcrypt reads 72 bytes; htpasswd and Go agree, bcrypt 5 would raise instead."""
    checker = BasicAuthChecker((BasicAuthUser("alice", _hash("a" * 72).encode()),))
    assert checker.check(b"alice", b"a" * 100) is True
    assert checker.check(b"alice", b"a" * 71) is False


def test_changed_file_applies_without_restart_and_a_broken_one_is_ignored(
    tmp_path: Path,
) -> None:
    """A changed web-config applies without a restart; a broken one leaves the last good one."""
    web = _write(tmp_path / "web.yml", f"basic_auth_users: {{alice: '{_hash('one')}'}}\n")
    with _serving(web) as server:
        url = f"http://{server.address}/metrics"
        assert _get(url, auth=("alice", "one")).status_code == 200

        def rewrite(text: str, step: int) -> None:
            web.write_text(text)
            stamp = web.stat().st_mtime_ns + step * 1_000_000_000
            os.utime(web, ns=(stamp, stamp))

        rewrite(f"basic_auth_users: {{alice: '{_hash('two')}'}}\n", 1)
        assert _get(url, auth=("alice", "one")).status_code == 401
        assert _get(url, auth=("alice", "two")).status_code == 200
        rewrite("basic_auth_users: {alice: not-a-hash}\n", 2)
        assert _get(url, auth=("alice", "two")).status_code == 200  # last good one stays
        assert _get(url, auth=("alice", "not-a-hash")).status_code == 401


# --- TLS --------------------------------------------------------------------------


def test_tls_with_relative_file_names_and_basic_auth(pki: Path, tmp_path: Path) -> None:
    """File names in the web-config are relative to its folder, not to the working dir."""
    folder = tmp_path / "etc"
    folder.mkdir()
    for name in ("server.crt", "server.key"):
        shutil.copy(pki / name, folder / name)
    web = _write(
        folder / "web.yml",
        f"""\
        tls_server_config:
          cert_file: server.crt
          key_file: server.key
        basic_auth_users:
          alice: '{_hash("wonderland")}'
        """,
    )
    with _serving(web) as server:
        assert server.scheme == "https"
        url = f"https://{server.address}/metrics"
        ca = str(pki / "server-ca.crt")
        scraped = _get(url, verify=ca, auth=("alice", "wonderland"))
        assert scraped.status_code == 200
        assert "tritonwatch_test_value 42.0" in scraped.text
        assert _get(url, verify=ca).status_code == 401
        with pytest.raises(requests.exceptions.SSLError):
            _get(url, auth=("alice", "wonderland"))  # the test CA is not a system CA
        with pytest.raises(requests.exceptions.ConnectionError):
            _get(f"http://{server.address}/metrics", auth=("alice", "wonderland"))


def test_a_client_stuck_before_its_handshake_does_not_block_others(
    pki: Path, tmp_path: Path
) -> None:
    """A client that connects and never says hello does not block other TLS scrapes."""
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key}}\n",
    )
    with (
        _serving(web) as server,
        socket.create_connection((server.address.host, server.address.port), timeout=5),
    ):
        url = f"https://{server.address}/metrics"
        assert _get(url, verify=str(pki / "server-ca.crt")).status_code == 200


def _tls_version(server: ExporterServer, context: ssl.SSLContext) -> str | None:
    with (
        socket.create_connection((server.address.host, server.address.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as connection,
    ):
        return connection.version()


def test_min_version_tls13_refuses_a_tls12_client(pki: Path, tmp_path: Path) -> None:
    """min_version TLS13 refuses a TLS 1.2 client, and the server answers others after."""
    web = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          min_version: TLS13
        """,
    )
    with _serving(web) as server:
        modern = ssl.create_default_context(cafile=str(pki / "server-ca.crt"))
        assert _tls_version(server, modern) == "TLSv1.3"
        old = ssl.create_default_context(cafile=str(pki / "server-ca.crt"))
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ssl.SSLError, match=r"PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL"):
            _tls_version(server, old)
        # A refused handshake costs that client only: the server still answers.
        assert _get(f"https://{server.address}/metrics", verify=str(pki / "server-ca.crt")).ok


def test_default_min_version_is_tls12(pki: Path, tmp_path: Path) -> None:
    """Without min_version TLS 1.2 is accepted and TLS 1.1 refused."""
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key}}\n",
    )
    with _serving(web) as server:
        tls12 = ssl.create_default_context(cafile=str(pki / "server-ca.crt"))
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        assert _tls_version(server, tls12) == "TLSv1.2"
        tls11 = ssl.create_default_context(cafile=str(pki / "server-ca.crt"))
        with warnings.catch_warnings():  # the client side may still ask for TLS 1.1
            warnings.simplefilter("ignore", DeprecationWarning)
            tls11.minimum_version = ssl.TLSVersion.TLSv1
            tls11.maximum_version = ssl.TLSVersion.TLSv1_1
        tls11.set_ciphers("DEFAULT:@SECLEVEL=0")
        with pytest.raises(ssl.SSLError):
            _tls_version(server, tls11)


def test_required_client_certificate(pki: Path, tmp_path: Path) -> None:
    """RequireAndVerifyClientCert refuses clients with no certificate or one of another CA."""
    web = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: {pki}/client-ca.crt
        """,
    )
    with _serving(web) as server:
        url = f"https://{server.address}/metrics"
        ca = str(pki / "server-ca.crt")
        client = (str(pki / "client.crt"), str(pki / "client.key"))
        accepted = _get(url, verify=ca, cert=client)
        assert accepted.status_code == 200
        assert "tritonwatch_test_value 42.0" in accepted.text
        with pytest.raises(requests.exceptions.ConnectionError):
            _get(url, verify=ca)  # no certificate
        with pytest.raises(requests.exceptions.ConnectionError):
            _get(url, verify=ca, cert=(str(pki / "stranger.crt"), str(pki / "stranger.key")))


def test_optional_client_certificate(pki: Path, tmp_path: Path) -> None:
    """VerifyClientCertIfGiven lets clients without a certificate in, but not a stranger's."""
    web = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          client_auth_type: VerifyClientCertIfGiven
          client_ca_file: {pki}/client-ca.crt
        """,
    )
    with _serving(web) as server:
        url = f"https://{server.address}/metrics"
        ca = str(pki / "server-ca.crt")
        assert _get(url, verify=ca).status_code == 200
        assert _get(url, verify=ca, cert=(str(pki / "client.crt"), str(pki / "client.key"))).ok
        with pytest.raises(requests.exceptions.ConnectionError):
            _get(url, verify=ca, cert=(str(pki / "stranger.crt"), str(pki / "stranger.key")))


def test_exporter_tls_options_still_work_with_a_users_only_web_config(
    pki: Path, tmp_path: Path
) -> None:
    """The exporter's own TLS options still serve https beside a users-only web-config."""
    web = _write(tmp_path / "web.yml", f"basic_auth_users: {{alice: '{_hash('wonderland')}'}}\n")
    with _serving(web, tls_cert_file=pki / "server.crt", tls_key_file=pki / "server.key") as srv:
        assert srv.scheme == "https"
        url = f"https://{srv.address}/metrics"
        ca = str(pki / "server-ca.crt")
        assert _get(url, verify=ca).status_code == 401
        assert _get(url, verify=ca, auth=("alice", "wonderland")).status_code == 200


def test_tls_twice_is_refused_by_the_server(pki: Path, tmp_path: Path) -> None:
    """TLS in both the exporter options and the web-config is refused by the server."""
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key}}\n",
    )
    with pytest.raises(ValueError, match="exporter TLS is set twice"):
        ExporterServer(
            ListenAddress("127.0.0.1", 0),
            exporter_app(CollectorRegistry(), lambda: HealthReport(True)),
            pki / "server.crt",
            pki / "server.key",
            web_config_file=web,
        )


# --- bad files --------------------------------------------------------------------

TLS = "tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/server.key\n"
BAD_FILES: dict[str, tuple[str, list[str]]] = {
    "min_version_unknown": (
        TLS + "  min_version: TLS14\n",
        ["tls_server_config.min_version: input should be 'TLS12' or 'TLS13', got: 'TLS14'"],
    ),
    "min_version_tls10": (
        TLS + "  min_version: TLS10\n",
        [
            "tls_server_config.min_version: is not supported by tritonwatch: Python deprecates "
            "TLS 1.0 and 1.1 and OpenSSL 3 refuses them at its default security level; use "
            "TLS12 or TLS13, got: 'TLS10'"
        ],
    ),
    "min_version_above_max": (
        TLS + "  min_version: TLS13\n  max_version: TLS12\n",
        ["tls_server_config.min_version: must not be above max_version (TLS12), got: 'TLS13'"],
    ),
    "hash_not_bcrypt": (
        "basic_auth_users:\n  alice: hunter2\n",
        [
            "basic_auth_users.alice: must be a bcrypt hash ($2a$, $2b$ or $2y$, cost 04-31, "
            "60 characters); the value is not shown in case it is a password"
        ],
    ),
    "user_with_colon": (
        "basic_auth_users:\n  'al:ice': " + "'$2y$04$" + "a" * 53 + "'\n",
        ["basic_auth_users.al:ice: user names must not contain ':' (basic auth splits on it)"],
    ),
    "users_not_a_mapping": (
        "basic_auth_users: [alice]\n",
        ["basic_auth_users: must be a mapping of user name to bcrypt hash"],
    ),
    "cert_file_missing": (
        "tls_server_config: {cert_file: missing.crt, key_file: '{pki}/server.key'}\n",
        [
            "tls_server_config.cert_file: cannot read {dir}/missing.crt: No such file or "
            "directory, got: 'missing.crt'"
        ],
    ),
    "key_file_missing_field": (
        "tls_server_config: {cert_file: '{pki}/server.crt'}\n",
        ["tls_server_config.key_file: required field is missing"],
    ),
    "cert_file_not_a_certificate": (
        "tls_server_config: {cert_file: '{pki}/server.key', key_file: '{pki}/server.key'}\n",
        ["tls_server_config.cert_file: must hold a PEM certificate, got: '{pki}/server.key'"],
    ),
    "key_does_not_match": (
        "tls_server_config: {cert_file: '{pki}/server.crt', key_file: '{pki}/client.key'}\n",
        [
            "tls_server_config.key_file: must hold the private key of the certificate in "
            "cert_file, but does not match it, got: '{pki}/client.key'"
        ],
    ),
    "key_not_a_key": (
        "tls_server_config: {cert_file: '{pki}/server.crt', key_file: '{pki}/server.crt'}\n",
        ["tls_server_config.key_file: must hold a PEM private key, got: '{pki}/server.crt'"],
    ),
    "key_encrypted": (
        "tls_server_config:\n  cert_file: '{pki}/server.crt'\n"
        "  key_file: '{pki}/server-encrypted.key'\n",
        ["tls_server_config.key_file: must not be encrypted, got: '{pki}/server-encrypted.key'"],
    ),
    "client_auth_without_ca": (
        TLS + "  client_auth_type: RequireAndVerifyClientCert\n",
        [
            "tls_server_config.client_ca_file: is required when client_auth_type is "
            "RequireAndVerifyClientCert"
        ],
    ),
    "ca_without_client_auth": (
        TLS + "  client_ca_file: '{pki}/client-ca.crt'\n",
        [
            "tls_server_config.client_auth_type: must be RequireAndVerifyClientCert or "
            "VerifyClientCertIfGiven when client_ca_file is set, got: 'NoClientCert'"
        ],
    ),
    "client_auth_unverified": (
        TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: '{pki}/client-ca.crt'\n",
        [
            "tls_server_config.client_auth_type: is not supported by tritonwatch: Python's ssl "
            "verifies every client certificate it accepts; use RequireAndVerifyClientCert with "
            "client_ca_file, got: 'RequireAnyClientCert'"
        ],
    ),
    "client_auth_unknown": (
        TLS + "  client_auth_type: Sometimes\n",
        [
            "tls_server_config.client_auth_type: input should be 'NoClientCert', "
            "'VerifyClientCertIfGiven' or 'RequireAndVerifyClientCert', got: 'Sometimes'"
        ],
    ),
    "typo": (
        TLS + "  min_versoin: TLS13\n",
        ["tls_server_config.min_versoin: unknown key (did you mean 'min_version'?)"],
    ),
    "unsupported_tls_and_http_settings": (
        TLS + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"
        "  key: '-----BEGIN PRIVATE KEY----- very secret'\n"
        "http_server_config: {headers: {X-Frame-Options: deny}}\n"
        "rate_limit: {interval: 1s, burst: 20}\n",
        [
            "http_server_config: is not supported by tritonwatch; remove it (the exporter "
            "speaks HTTP/1.1 and adds no headers)",
            "rate_limit: is not supported by tritonwatch; remove it",
            "tls_server_config.key: inline PEM is not supported by tritonwatch; put it in a "
            "file named by key_file",
            "tls_server_config.cipher_suites: is not supported by tritonwatch; remove it "
            "(OpenSSL's default ciphers apply)",
        ],
    ),
    "several_at_once": (
        "tls_server_config: {cert_file: '{pki}/server.crt', key_file: '{pki}/server.key', "
        "min_version: TLS9}\nbasic_auth_users: {alice: plain}\nbasic_auth: {}\n",
        [
            "basic_auth_users.alice: must be a bcrypt hash ($2a$, $2b$ or $2y$, cost 04-31, "
            "60 characters); the value is not shown in case it is a password",
            "tls_server_config.min_version: input should be 'TLS12' or 'TLS13', got: 'TLS9'",
            "basic_auth: unknown key (did you mean 'basic_auth_users'?)",
        ],
    ),
    "empty": ("", [""]),
    "not_a_mapping": ("- alice\n", [""]),
}
WHOLE_FILE_MESSAGES = {"empty": "the file is empty", "not_a_mapping": None}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_web_config_names_file_field_and_value(pki: Path, tmp_path: Path, name: str) -> None:
    """Each bad web-config is refused naming file, field and value, never a password."""
    text, expected = BAD_FILES[name]
    path = tmp_path / "web.yml"
    path.write_text(text.replace("{pki}", str(pki)))
    with pytest.raises(WebConfigError) as caught:
        load_web_config(path)
    message = str(caught.value)
    if name in WHOLE_FILE_MESSAGES:
        whole = WHOLE_FILE_MESSAGES[name] or 'must be a mapping at the top level, got: ["alice"]'
        assert message == f"{path}: {whole}"
        return
    lines = [line.replace("{pki}", str(pki)).replace("{dir}", str(tmp_path)) for line in expected]
    assert message.splitlines() == [f"{path}: {line}" for line in lines]
    assert "hunter2" not in message
    assert "very secret" not in message
    assert "plain" not in message


def test_a_good_file_loads_into_settings(pki: Path, tmp_path: Path) -> None:
    """A full web-config loads into TLS and user settings, with hashes kept out of repr."""
    path = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config:
          cert_file: {pki}/server.crt
          key_file: {pki}/server.key
          min_version: TLS13
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: {pki}/client-ca.crt
        basic_auth_users:
          alice: '{_hash("wonderland", prefix="$2y$")}'
        """,
    )
    web = load_web_config(path)
    assert web.tls is not None
    assert web.tls.min_version is ssl.TLSVersion.TLSv1_3
    assert web.tls.max_version is ssl.TLSVersion.TLSv1_3
    assert web.tls.client_auth is ssl.CERT_REQUIRED
    assert web.tls.client_ca_file == pki / "client-ca.crt"
    assert [user.name for user in web.users] == ["alice"]
    assert web.users[0].password_hash.startswith(b"$2b$04$")  # $2y$ stored as $2b$
    assert "$2" not in repr(web)  # hashes stay out of reprs, hence out of logs


# --- the config file, check-config and the daemon ---------------------------------


def _config(tmp_path: Path, exporter: str) -> Path:
    return _write(
        tmp_path / "tritonwatch.yaml",
        f"""\
        exporter: {exporter}
        targets:
          - {{name: prod, url: 'http://127.0.0.1:9', models: [{{name: simple}}]}}
        """,
    )


def test_check_config_exits_2_naming_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-config exits 2 on a bad web-config, naming the config and the web-config."""
    web = _write(tmp_path / "web.yml", "basic_auth_users: {alice: hunter2}\n")
    config = _config(tmp_path, f"{{web_config_file: '{web}'}}")
    assert main(["check-config", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"{config}: exporter.web_config_file: {web}: basic_auth_users.alice: must be a bcrypt "
        "hash ($2a$, $2b$ or $2y$, cost 04-31, 60 characters); the value is not shown in case "
        "it is a password\n"
    )


def test_tls_in_both_places_is_a_config_error(pki: Path, tmp_path: Path) -> None:
    """TLS in both the exporter section and its web-config is a config error saying so."""
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config: {{cert_file: '{pki}/server.crt', key_file: '{pki}/server.key'}}\n",
    )
    exporter = (
        f"{{web_config_file: '{web}', tls_cert_file: '{pki}/server.crt', "
        f"tls_key_file: '{pki}/server.key'}}"
    )
    config = _config(tmp_path, exporter)
    with pytest.raises(ConfigError) as caught:
        parse_config(config.read_text(), "tw.yaml")
    assert str(caught.value) == (
        f"tw.yaml: exporter.tls_cert_file: cannot be used with tls_server_config in {web}; "
        f"keep TLS in one place, got: '{pki}/server.crt'"
    )


def test_a_good_web_config_passes_check_config(
    pki: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-config passes a config whose web-config is good."""
    web = _write(
        tmp_path / "web.yml",
        f"tls_server_config: {{cert_file: '{pki}/server.crt', key_file: '{pki}/server.key'}}\n",
    )
    config = _config(tmp_path, f"{{web_config_file: '{web}'}}")
    assert main(["check-config", str(config)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {config}: 1 target")


def test_daemon_reads_the_web_config_from_the_environment(tmp_path: Path) -> None:
    """The daemon takes its web-config from the environment and never logs the password."""
    web = _write(tmp_path / "web.yml", f"basic_auth_users: {{alice: '{_hash('wonderland')}'}}\n")
    config = _config(tmp_path, "{}")
    daemon = DaemonProcess(config, env={"TRITONWATCH_WEB_CONFIG_FILE": str(web)})
    try:
        url = f"{daemon.url}/metrics"
        assert _get(url).status_code == 401
        scraped = _get(url, auth=("alice", "wonderland"))
        assert scraped.status_code == 200
        assert "tritonwatch_build_info" in scraped.text
        assert "wonderland" not in "".join(daemon.lines)
    finally:
        assert daemon.stop() == 0


def test_daemon_exits_2_on_a_bad_web_config_flag(tmp_path: Path) -> None:
    """The daemon exits 2 on a bad --web-config-file, naming each unreadable file."""
    web = _write(tmp_path / "web.yml", "tls_server_config: {cert_file: a.crt, key_file: a.key}\n")
    config = _config(tmp_path, "{}")
    finished = subprocess.run(
        [TRITONWATCH, "run", "--config", str(config), "--web-config-file", str(web),
         "--listen", "127.0.0.1:0", "--log-format", "json"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert finished.returncode == 2
    assert finished.stderr == (
        f"--web-config-file: exporter.web_config_file: {web}: tls_server_config.cert_file: "
        f"cannot read {tmp_path}/a.crt: No such file or directory, got: 'a.crt'\n"
        f"--web-config-file: exporter.web_config_file: {web}: tls_server_config.key_file: "
        f"cannot read {tmp_path}/a.key: No such file or directory, got: 'a.key'\n"
    )


# --- a real Prometheus ------------------------------------------------------------


def _prometheus(tmp_path: Path, scrape_configs: str) -> tuple[subprocess.Popen[str], str]:
    config = _write(
        tmp_path / "prometheus.yml",
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
        + scrape_configs,
    )
    address = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--web.listen-address={address}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return process, f"http://{address}"


def _up_by_job(prometheus_url: str) -> Callable[[], dict[str, float] | None]:
    def read() -> dict[str, float] | None:
        try:
            answer = _get(f"{prometheus_url}/api/v1/query", params={"query": "up"})
        except requests.exceptions.ConnectionError:
            return None
        if answer.status_code != 200:  # 503 until Prometheus is ready
            return None
        reply = answer.json()
        found = {s["metric"]["job"]: float(s["value"][1]) for s in reply["data"]["result"]}
        return found if len(found) == 2 else None

    return read


def test_prometheus_scrapes_the_tls_exporter_with_basic_auth(pki: Path, tmp_path: Path) -> None:
    """A real Prometheus scrapes the TLS exporter with the right password, not the wrong one."""
    web = _write(
        tmp_path / "web.yml",
        f"""\
        tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key}}
        basic_auth_users: {{prometheus: '{_hash("scrape-me")}'}}
        """,
    )
    with _serving(web) as server:

        def job(name: str, password: str) -> str:
            return (
                f"  - job_name: {name}\n    scheme: https\n"
                f"    basic_auth: {{username: prometheus, password: {password}}}\n"
                f"    tls_config: {{ca_file: {pki}/server-ca.crt}}\n"
                f"    static_configs: [{{targets: ['{server.address}']}}]\n"
            )

        scrape_configs = job("right", "scrape-me") + job("wrong", "guess")
        process, url = _prometheus(tmp_path, scrape_configs)
        try:
            up = wait_until(_up_by_job(url), timeout=15, what="Prometheus to scrape both jobs")
        finally:
            process.terminate()
            process.wait(timeout=10)
            assert process.stderr is not None
            process.stderr.close()
    assert up == {"right": 1.0, "wrong": 0.0}
