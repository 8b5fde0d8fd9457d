"""The TLS flags of ``sweep``, ``tune`` and ``simulate``: bad combinations are usage
errors (exit 2) that say which flag, before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonwatch.commands.cli import main


@pytest.mark.parametrize("command", ["sweep", "tune"])
def test_a_client_certificate_without_its_key_is_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--cert-file without --key-file is a usage error (exit 2) before anything is sent."""
    cert = tmp_path / "client.crt"
    cert.write_text("not read: refused before use")
    extra = ["--budget-p95", "50ms"] if command == "tune" else []
    argv = [command, "--url", "https://127.0.0.1:9", "--model", "m", "--cert-file", str(cert)]
    assert main([*argv, *extra]) == 2
    assert "--key-file is required with --cert-file" in capsys.readouterr().out


def test_a_missing_ca_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --ca-file that does not exist is a usage error naming the flag and the path."""
    missing = tmp_path / "nope.pem"
    argv = ["sweep", "--url", "https://127.0.0.1:9", "--model", "m", "--ca-file", str(missing)]
    assert main(argv) == 2
    printed = "".join(capsys.readouterr().out.split())  # the console wraps long lines anywhere
    assert "".join(f"--ca-file: no such file, got: '{missing}'".split()) in printed


def test_simulate_needs_a_certificate_for_grpc_tls(capsys: pytest.CaptureFixture[str]) -> None:
    """simulate --grpc-use-ssl without a server certificate and key is a usage error."""
    assert main(["simulate", "--grpc-port", "0", "--grpc-use-ssl"]) == 2
    assert "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key" in (
        capsys.readouterr().err
    )
