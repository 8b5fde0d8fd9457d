"""TLS toward Triton, with every client the daemon, ``sweep`` and ``tune`` use.

gRPC: the simulator serves TLS itself, as Triton's ``--grpc-use-ssl-mutual`` does.
HTTP and ``/metrics``: through a TLS-terminating proxy, as Triton is deployed. Both ask
for a client certificate, so each test also shows the client presents one; the
negative cases (no client certificate, an unrelated CA) show verification is real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tritonwatch.sweep.worker as sweep_worker
from engine_infer_support import engine_infer, library_infer
from support import DaemonProcess, sample_value, wait_until
from tls_support import Pki, TlsProxy, make_pki
from tritonwatch.commands.tune.repository import ModelRepository
from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.config.schema import TargetConfig, TargetTLS, WatchedModel
from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.clients import classify_error, client_for
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.readiness import GrpcReadinessProbe, HttpReadinessProbe
from tritonwatch.records.observations import Outcome
from tritonwatch.records.sweep_records import SweepSettings
from tritonwatch.records.target_state import ScrapeSource
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.sim.server import GrpcTLS, Simulator
from tritonwatch.sweep.load_sweep import SweepRunner

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sim(pki: Pki) -> Iterator[Simulator]:
    tls = GrpcTLS(pki.server_cert, pki.server_key, root_cert=pki.ca, mutual=True)
    with Simulator(grpc_tls=tls, metrics_interval_s=0.2) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def api_proxy(sim: Simulator, pki: Pki) -> Iterator[TlsProxy]:
    port = int(sim.http_url.rsplit(":", 1)[1])
    with TlsProxy(port, pki, mutual=True) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def metrics_proxy(sim: Simulator, pki: Pki) -> Iterator[TlsProxy]:
    port = int(sim.metrics_url.rsplit(":", 1)[1].removesuffix("/metrics"))
    with TlsProxy(port, pki, mutual=True) as proxy:
        yield proxy


def _mutual(pki: Pki) -> ClientTLS:
    return ClientTLS(pki.ca, pki.client_cert, pki.client_key)


def _simple_inputs() -> list[Tensor]:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    return [Tensor.from_numpy("INPUT0", "INT32", data), Tensor.from_numpy("INPUT1", "INT32", data)]


def test_grpc_readiness_needs_the_client_certificate_and_the_right_ca(
    sim: Simulator, pki: Pki
) -> None:
    """gRPC readiness is up only with the client certificate and the server's own CA."""
    url = f"grpcs://{sim.grpc_url}"
    probes = {
        "mutual": GrpcReadinessProbe("t", url, 5.0, tls=_mutual(pki)),
        "no client cert": GrpcReadinessProbe("t", url, 5.0, tls=ClientTLS(pki.ca)),
        "other CA": GrpcReadinessProbe(
            "t", url, 5.0, tls=ClientTLS(pki.other_ca, pki.client_cert, pki.client_key)
        ),
    }
    try:
        seen = {name: probe.check() for name, probe in probes.items()}
    finally:
        for probe in probes.values():
            probe.close()
    assert seen["mutual"].ready
    assert seen["mutual"].outcome is Outcome.SUCCESS
    for name in ("no client cert", "other CA"):
        assert not seen[name].ready, name
        assert seen[name].outcome is Outcome.CONNECTION_ERROR, (name, seen[name].error)


def test_https_readiness_through_a_tls_proxy(api_proxy: TlsProxy, pki: Pki) -> None:
    """HTTPS readiness passes with the right CA and fails on another as a connection error."""
    url = f"https://{api_proxy.base}"
    good = HttpReadinessProbe("t", url, 5.0, tls=_mutual(pki))
    untrusted = HttpReadinessProbe("t", url, 5.0, tls=ClientTLS(pki.other_ca))
    try:
        assert good.check().ready
        failed = untrusted.check()
    finally:
        good.close()
        untrusted.close()
    assert not failed.ready
    assert failed.outcome is Outcome.CONNECTION_ERROR
    assert "CERTIFICATE_VERIFY_FAILED" in failed.error or "certificate" in failed.error


def _canary_client(
    protocol: str, sim: Simulator, api_proxy: TlsProxy, tls: ClientTLS
) -> InferenceClient:
    """The canary's client for ``protocol``, as the runner makes it for a TLS target."""
    return client_for(protocol, f"https://{api_proxy.base}", f"grpcs://{sim.grpc_url}", tls)


def test_canary_clients_infer_over_https_and_grpcs(
    sim: Simulator, api_proxy: TlsProxy, pki: Pki
) -> None:
    """Both canary clients infer over mutual TLS and get the model's right answer, from
    the engine (the canary's own path) and through the library path alike."""

    async def infer_all() -> list[tuple[str, str, list[list[int]]]]:
        outputs = []
        for protocol in ("http", "grpc"):
            client = _canary_client(protocol, sim, api_proxy, _mutual(pki))
            try:
                for send in (engine_infer, library_infer):
                    result = await send(client, "simple", "", _simple_inputs(), timeout=5)
                    outputs.append((protocol, send.__name__, result.as_numpy("OUTPUT0").tolist()))
            finally:
                await client.close()
        return outputs

    assert asyncio.run(infer_all()) == [
        (protocol, send, [list(range(0, 32, 2))])
        for protocol in ("http", "grpc")
        for send in ("engine_infer", "library_infer")
    ]


def test_a_grpc_canary_without_its_certificate_is_a_connection_error(
    sim: Simulator, api_proxy: TlsProxy, pki: Pki
) -> None:
    """A gRPC canary refused for lacking its client certificate counts as a connection
    error, from the engine and through the library path alike."""

    async def infer() -> list[BaseException]:
        client = _canary_client("grpc", sim, api_proxy, ClientTLS(pki.ca))
        errors = []
        try:
            for send in (engine_infer, library_infer):
                try:
                    await send(client, "simple", "", _simple_inputs(), timeout=5)
                except Exception as error:
                    errors.append(error)
                else:
                    raise AssertionError("the server accepted a client without a certificate")
        finally:
            await client.close()
        return errors

    errors = asyncio.run(infer())
    assert [classify_error(error, "grpc") for error in errors] == [Outcome.CONNECTION_ERROR] * 2


def test_scraper_reads_metrics_stats_and_config_over_https(
    sim: Simulator, api_proxy: TlsProxy, metrics_proxy: TlsProxy, pki: Pki
) -> None:
    """The scraper reads /metrics, statistics and model config over mutual TLS."""
    target = TargetConfig(
        name="secure",
        url=f"https://{api_proxy.base}",
        metrics_url=f"https://{metrics_proxy.base}/metrics",
        tls=TargetTLS(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key),
        models=(WatchedModel(name="simple"),),
    )
    scraper = TargetScraper(target, timeout=5.0)
    try:
        outcome = scraper.scrape_once()
    finally:
        scraper.close()
    assert {source: o.ok for source, o in outcome.sources.items()} == {
        ScrapeSource.METRICS: True,
        ScrapeSource.STATS: True,
        ScrapeSource.CONFIG: True,
    }
    assert scraper.state().models["simple"].config is not None


@pytest.mark.parametrize("scheme", ["https", "grpcs", "grpcs-library"])
def test_sweep_and_repository_over_tls(
    scheme: str,
    sim: Simulator,
    api_proxy: TlsProxy,
    pki: Pki,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep and the model repository client work over https and grpcs with client
    certs; gRPC both on the wire code and on ``grpc`` (what requests over 64 KiB take)."""
    if scheme == "grpcs-library":
        monkeypatch.setattr(sweep_worker, "h2_request", lambda spec: None)
    url = f"https://{api_proxy.base}" if scheme == "https" else f"grpcs://{sim.grpc_url}"
    protocol = "http" if scheme == "https" else "grpc"
    settings = SweepSettings(
        url=url, model="simple", levels=(2.0,), protocol=protocol, window_seconds=0.3,
        max_windows=3, max_processes=1, tls=_mutual(pki),
    )  # fmt: skip
    step = SweepRunner(settings).run().steps[0]
    assert step.requests > 10
    assert step.errors == 0
    assert step.server is not None  # statistics came back over TLS too
    repository = ModelRepository(url, "simple", tls=_mutual(pki))
    try:
        assert repository.config()["max_batch_size"] == 8
    finally:
        repository.close()


def test_the_daemon_watches_a_target_behind_mutual_tls(
    sim: Simulator, api_proxy: TlsProxy, metrics_proxy: TlsProxy, pki: Pki, tmp_path: Path
) -> None:
    """Readiness and the HTTP canary through the proxy, the gRPC canary straight to the
    simulator's TLS port, scrapes of ``/metrics`` and the APIs: all with the client cert."""
    config = tmp_path / "tritonwatch.yaml"
    config.write_text(
        f"""
scrape: {{interval: 500ms, timeout: 400ms}}
canary: {{rate: 10/s}}
targets:
  - name: secure
    url: https://{api_proxy.base}
    grpc_url: grpcs://{sim.grpc_url}
    metrics_url: https://{metrics_proxy.base}/metrics
    tls: {{ca_file: {pki.ca}, cert_file: {pki.client_cert}, key_file: {pki.client_key}}}
    models:
      - {{name: simple}}
      - {{name: resnet50, canary: {{protocol: grpc}}}}
"""
    )
    daemon = DaemonProcess(config)
    try:

        def successes(text: str, model: str, protocol: str) -> float:
            labels = [("target", "secure"), ("model", model), ("protocol", protocol),
                      ("outcome", "success")]  # fmt: skip
            return sample_value(text, "tritonwatch_canary_requests_total", labels) or 0.0

        def all_working() -> str | None:
            text = daemon.metrics()
            working = (
                sample_value(text, "tritonwatch_up", [("target", "secure")]) == 1
                and successes(text, "simple", "http") >= 5
                and successes(text, "resnet50", "grpc") >= 5
                and all(
                    sample_value(text, "tritonwatch_scrape_success", [("target", "secure"), s]) == 1
                    for s in (("source", "metrics"), ("source", "stats"))
                )
            )
            return text if working else None

        text = wait_until(all_working, timeout=20, what="canary, readiness and scrapes over TLS")
        failures = [
            line for line in text.splitlines()
            if line.startswith("tritonwatch_canary_requests_total")
            and 'outcome="success"' not in line and not line.endswith(" 0.0")
        ]  # fmt: skip
        assert failures == []
    finally:
        assert daemon.stop() == 0
