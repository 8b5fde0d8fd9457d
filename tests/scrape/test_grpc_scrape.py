"""The statistics and config APIs of a ``grpc://`` target, read over gRPC.

Against the simulator's gRPC frontend (the real ``tritonclient.grpc`` and ``grpcio``)
and small real gRPC servers that lack the APIs or never answer; the same against real
Triton is in tests/triton/test_grpc_scrape_real_triton.py.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from sim_traffic import FakeClock, infer
from structlog.testing import capture_logs
from tritonclient.grpc import service_pb2_grpc

from stub_server import Route, StubServer
from support import RefusedHttp, fixtures_dir
from tls_support import Pki, make_pki
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.target_state import FetchStatus, ScrapeSource
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.sim.server import GrpcTLS, Simulator
from tritonwatch.triton_api.client import ModelApiClient

pytestmark = pytest.mark.real


class ScriptedTriton(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """A real gRPC server with Triton's service whose statistics and config RPCs are
    UNIMPLEMENTED (a KServe-only server) or hang until released; it counts the calls."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.calls: list[str] = []
        self.names: list[str] = []
        """The model name of each call ("" asks for every model)."""
        self.released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self, self.server)
        self.url = f"grpc://127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _answer(self, name: str, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls.append(name)
        self.names.append(request.name)
        if self.behaviour == "hang":
            self.released.wait(10)
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"Method {name} not implemented")

    def ModelStatistics(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._answer("ModelStatistics", request, context)

    def ModelConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self._answer("ModelConfig", request, context)

    def close(self) -> None:
        self.released.set()
        self.server.stop(grace=None)


@pytest.fixture
def metrics_stub(stub: StubServer) -> StubServer:
    stub.routes["/metrics"] = Route(
        body=(fixtures_dir() / "triton_metrics" / "sample_04.txt").read_bytes()
    )
    return stub


def events(logs: Sequence[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == name]


def grpc_target(url: str, metrics_url: str, *models: str, **extra: Any) -> TargetConfig:
    return TargetConfig.model_validate(
        {
            "name": "g",
            "url": url,
            "metrics_url": metrics_url,
            "models": [{"name": model} for model in models],
            **extra,
        }
    )


def recording_session(refuse: str | None = None) -> tuple[requests.Session, RefusedHttp, list[str]]:
    """A session that records every URL it answers, and refuses any under ``refuse``."""
    session = requests.Session()
    refused = RefusedHttp()
    if refuse is not None:
        session.mount(refuse, refused)
    asked: list[str] = []
    session.hooks["response"].append(lambda response, *a, **k: asked.append(response.url))
    return session, refused, asked


def test_a_grpc_target_reads_statistics_and_config_over_grpc(
    sim: Simulator, clock: FakeClock
) -> None:
    """Breaks if a grpc:// target's APIs go to the guessed HTTP port: refused there, the
    statistics and config come over gRPC, equal to what the HTTP API says."""
    target = grpc_target(f"grpc://{sim.grpc_url}", sim.metrics_url, "simple")
    session, refused, asked = recording_session(refuse=target.effective_http_url)
    scraper = TargetScraper(target, 2.0, clock, session)
    assert scraper.scrape_once().sources[ScrapeSource.STATS].ok
    infer(sim, "simple", 3, batch_size=4)
    infer(sim, "simple", 2, batch_size=1)
    clock.advance(10.0)
    outcome = scraper.scrape_once()
    scraper.close()
    assert {source: o.status for source, o in outcome.sources.items()} == {
        ScrapeSource.METRICS: FetchStatus.SUCCESS,
        ScrapeSource.STATS: FetchStatus.SUCCESS,
    }
    batches = scraper.state().models["simple"].batches
    assert batches is not None
    assert dict(batches.executions_per_second_by_size) == {1: 0.2, 4: 0.3}
    config = scraper.state().models["simple"].config
    http_config = requests.get(f"{sim.http_url}/v2/models/simple/config", timeout=5).json()
    assert config is not None and dict(config.raw) == http_config
    assert config.max_batch_size == http_config["max_batch_size"] == 8
    assert refused.asked == []
    assert asked == [sim.metrics_url, sim.metrics_url]  # HTTP is /metrics only


def test_an_http_url_keeps_the_apis_on_http(sim: Simulator, clock: FakeClock) -> None:
    """Breaks if a grpc:// target with an explicit http_url stops using it."""
    target = grpc_target(f"grpc://{sim.grpc_url}", sim.metrics_url, "simple", http_url=sim.http_url)
    session, _, asked = recording_session()
    assert ModelApiClient.for_target(target, session=session).protocol == "http"
    outcome = TargetScraper(target, 2.0, clock, session).scrape_once()
    assert all(o.ok for o in outcome.sources.values())
    assert asked == [
        sim.metrics_url,
        f"{sim.http_url}/v2/models/stats",
        f"{sim.http_url}/v2/models/simple/config",
    ]


def test_a_grpc_server_without_the_apis_switches_them_off(metrics_stub: StubServer) -> None:
    """Breaks if UNIMPLEMENTED is treated as a failure: each API is asked once (the
    statistics for all models, then for the first model), switched off with one log line
    naming the gRPC status, and absent from the health series."""
    server = ScriptedTriton("unimplemented")
    try:
        target = grpc_target(server.url, f"{metrics_stub.url}/metrics", "a", "b")
        scraper = TargetScraper(target, 2.0, FakeClock())
        with capture_logs() as logs:
            outcomes = [scraper.scrape_once() for _ in range(3)]
        scraper.close()
    finally:
        server.close()
    assert [set(outcome.sources) for outcome in outcomes] == [{ScrapeSource.METRICS}] * 3
    off = events(logs, "scrape_feature_unsupported")
    assert [(line["source"], line["protocol"], line["grpc_status"]) for line in off] == [
        ("stats", "grpc", "UNIMPLEMENTED"),
        ("config", "grpc", "UNIMPLEMENTED"),
    ]
    assert server.calls == ["ModelStatistics", "ModelStatistics", "ModelConfig"]
    assert server.names == ["", "a", "a"]
    assert set(scraper.state().sources) == {ScrapeSource.METRICS}
    assert not scraper.state().failures


def test_a_hung_grpc_server_costs_one_deadline_for_the_whole_cycle(
    metrics_stub: StubServer,
) -> None:
    """Breaks if a gRPC call may outlast the cycle's deadline: the statistics call runs
    into it (timeout) and the config call has no time left, also a timeout."""
    server = ScriptedTriton("hang")
    try:
        target = grpc_target(server.url, f"{metrics_stub.url}/metrics", "a")
        scraper = TargetScraper(target, 0.5)
        outcome = scraper.scrape_once()
        scraper.close()
    finally:
        server.close()
    stats, config = outcome.sources[ScrapeSource.STATS], outcome.sources[ScrapeSource.CONFIG]
    assert (stats.status, config.status) == (FetchStatus.TIMEOUT, FetchStatus.TIMEOUT)
    assert stats.error.startswith("all models: gRPC DEADLINE_EXCEEDED")
    assert config.error == "a: no time left in this scrape"
    assert server.calls == ["ModelStatistics"]
    assert scraper.state().failures == {
        (ScrapeSource.STATS, FetchStatus.TIMEOUT): 1,
        (ScrapeSource.CONFIG, FetchStatus.TIMEOUT): 1,
    }


def test_nothing_on_the_grpc_port_is_a_connection_error(
    metrics_stub: StubServer, closed_url: str
) -> None:
    """Breaks if a refused gRPC connection raises, or is counted as anything else."""
    url = closed_url.replace("http://", "grpc://")
    scraper = TargetScraper(grpc_target(url, f"{metrics_stub.url}/metrics", "a"), 2.0)
    outcome = scraper.scrape_once()
    scraper.close()
    assert outcome.ok  # /metrics is read all the same
    for source, asked in ((ScrapeSource.STATS, "all models"), (ScrapeSource.CONFIG, "a")):
        assert outcome.sources[source].status is FetchStatus.CONNECTION_ERROR
        assert outcome.sources[source].error.startswith(f"{asked}: gRPC UNAVAILABLE")


def test_an_unknown_model_is_a_grpc_error_and_keeps_the_apis(
    sim: Simulator, clock: FakeClock
) -> None:
    """Breaks if a model-level error for one model switches the whole API off."""
    target = grpc_target(f"grpc://{sim.grpc_url}", sim.metrics_url, "simple", "missing")
    scraper = TargetScraper(target, 2.0, clock)
    with capture_logs() as logs:
        outcome = scraper.scrape_once()
    scraper.close()
    stats, config = outcome.sources[ScrapeSource.STATS], outcome.sources[ScrapeSource.CONFIG]
    assert (stats.status, config.status) == (FetchStatus.GRPC_ERROR, FetchStatus.GRPC_ERROR)
    # What real Triton 2.51 answers too: statistics INVALID_ARGUMENT, config NOT_FOUND.
    assert stats.error.startswith("missing: gRPC INVALID_ARGUMENT")
    assert config.error.startswith("missing: gRPC NOT_FOUND")
    assert not events(logs, "scrape_feature_unsupported")
    assert scraper.state().models["simple"].config is not None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_grpcs_uses_the_targets_tls_for_the_apis(pki: Pki, tmp_path: Path) -> None:
    """Breaks if the gRPC statistics and config calls ignore ``tls``: with the client
    certificate they work, without it the server refuses the handshake."""
    tls = GrpcTLS(pki.server_cert, pki.server_key, root_cert=pki.ca, mutual=True)
    with Simulator(grpc_tls=tls) as sim:
        settings = {"ca_file": str(pki.ca)}
        mutual = {**settings, "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
        outcomes = {}
        for name, tls_settings in (("mutual", mutual), ("no client cert", settings)):
            target = grpc_target(
                f"grpcs://{sim.grpc_url}", sim.metrics_url, "simple", tls=tls_settings
            )
            scraper = TargetScraper(target, 2.0)
            outcomes[name] = scraper.scrape_once().sources
            scraper.close()
    assert outcomes["mutual"][ScrapeSource.STATS].ok and outcomes["mutual"][ScrapeSource.CONFIG].ok
    for source in (ScrapeSource.STATS, ScrapeSource.CONFIG):
        assert outcomes["no client cert"][source].status is FetchStatus.CONNECTION_ERROR
