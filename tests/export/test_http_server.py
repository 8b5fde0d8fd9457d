"""The exporter's HTTP server: routes, health codes, TLS."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

from support import http_get
from tritonwatch.common.listen import ListenAddress
from tritonwatch.export.http_server import ExporterServer, HealthReport, exporter_app

pytestmark = pytest.mark.real


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Gauge("tritonwatch_test_value", "A test gauge.", registry=registry).set(42)
    return registry


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[tuple[ExporterServer, dict[str, bool]]]:
    state = {"healthy": True}

    def health() -> HealthReport:
        if state["healthy"]:
            return HealthReport(True, {"status": "healthy"})
        return HealthReport(False, {"status": "unhealthy", "reason": "jobs did not run"})

    server = ExporterServer(ListenAddress("127.0.0.1", 0), exporter_app(registry, health))
    server.start()
    yield server, state
    server.stop()


def test_metrics_health_index_and_404(server: tuple[ExporterServer, dict[str, bool]]) -> None:
    """/metrics, /health (200 or 503 with a reason), / and a JSON 404 for anything else."""
    exporter, state = server
    base = f"http://{exporter.address}"
    status, body = http_get(f"{base}/metrics")
    assert status == 200
    assert "tritonwatch_test_value 42.0" in body
    assert http_get(f"{base}/health") == (200, '{"status": "healthy"}')
    state["healthy"] = False
    status, body = http_get(f"{base}/health")
    assert status == 503
    assert json.loads(body) == {"status": "unhealthy", "reason": "jobs did not run"}
    assert http_get(f"{base}/")[0] == 200
    assert http_get(f"{base}/nope") == (404, '{"error": "no page at /nope"}')


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_scrape_with_the_servers_certificate(
    tmp_path: Path, registry: CollectorRegistry
) -> None:
    """With a certificate the exporter serves https that only a client trusting it accepts."""
    cert, key = _self_signed(tmp_path)
    app = exporter_app(registry, lambda: HealthReport(True))
    server = ExporterServer(ListenAddress("127.0.0.1", 0), app, cert, key)
    server.start()
    try:
        assert server.scheme == "https"
        context = ssl.create_default_context(cafile=str(cert))
        url = f"https://{server.address}/metrics"
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            assert "tritonwatch_test_value 42.0" in response.read().decode()
        with pytest.raises(urllib.error.URLError):  # plain TLS without trusting the cert fails
            urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=5)
    finally:
        server.stop()
