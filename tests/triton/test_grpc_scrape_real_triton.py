"""A ``grpc://`` target on real Triton 2.51: statistics and config over gRPC, nothing over
HTTP but ``/metrics``, and the advisor that needs them speaking up.

Found on real Triton: such a target was asked for its statistics and config over HTTP at
a guessed port (the same host on 8000), which was refused, so there was no config, and
the advisor stayed silent on a 30 ms queue under a 10 ms budget.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from real_triton import RealTriton
from support import DaemonProcess, RefusedHttp, sample_value, wait_until
from tls_support import Pki, make_pki
from tritonwatch.analysis.breakdown import judge_target
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.observations import ModelStatistics
from tritonwatch.records.target_state import FetchStatus, ScrapeSource
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.scrape.triton_stats import parse_model_statistics
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import ApiEndpoint

pytestmark = pytest.mark.real

MODELS = ("slow_queue", "batching")


def grpc_target(server: RealTriton, *models: str, **extra: Any) -> TargetConfig:
    """A target configured by its gRPC endpoint, with no ``http_url``."""
    return TargetConfig.model_validate(
        {
            "name": "real",
            "url": server.grpc_url,
            "metrics_url": server.metrics_url,
            "models": [{"name": model} for model in models],
            **extra,
        }
    )


def guarded_session(target: TargetConfig) -> tuple[requests.Session, RefusedHttp, list[str]]:
    """A session on which the guessed HTTP port is closed, recording every URL answered."""
    session = requests.Session()
    refused = RefusedHttp()
    session.mount(target.effective_http_url, refused)
    answered: list[str] = []
    session.hooks["response"].append(lambda response, *a, **k: answered.append(response.url))
    return session, refused, answered


@pytest.fixture
def grpc_client(real_triton: RealTriton) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(real_triton.grpc_address)
    yield client
    client.close()


def send(client: grpcclient.InferenceServerClient, model: str, rows: int = 1) -> None:
    tensor = grpcclient.InferInput("INPUT0", [rows, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, 16), np.float32))
    client.infer(model, [tensor])


def settle(server: RealTriton, model: str, successes: int) -> None:
    """Waits until the HTTP API counts ``successes`` (Triton counts a request when it is
    released, just after its answer), so both protocols then see the same numbers."""
    wait_until(
        lambda: server.stats(model)["inference_stats"]["success"]["count"] >= successes,
        10,
        f"{model}'s statistics to count {successes} requests",
    )


def http_statistics(server: RealTriton, model: str) -> ModelStatistics:
    status, body = server.request("GET", f"/v2/models/{model}/stats")
    assert status == 200, body
    return parse_model_statistics(json.loads(body), model, "", 0.0)


def quiet(server: RealTriton, *models: str) -> None:
    """Waits until no request of an earlier test is still to be counted."""

    def unchanged() -> bool:
        first = [counts(http_statistics(server, model)) for model in models]
        time.sleep(0.1)
        return first == [counts(http_statistics(server, model)) for model in models]

    wait_until(unchanged, 10, f"the statistics of {models} to stop changing")


def counts(stats: ModelStatistics) -> tuple[int, int, int, dict[int, int]]:
    return (
        stats.inference_count,
        stats.execution_count,
        stats.success_count,
        dict(stats.batch_executions),
    )


def test_statistics_and_config_over_grpc_equal_the_http_api(
    real_triton: RealTriton, grpc_client: grpcclient.InferenceServerClient
) -> None:
    """Breaks if a grpc:// target's statistics or config differ from the HTTP API's for
    the same models (counts, batch sizes, max_queue_delay), or are not read at all."""
    target = grpc_target(real_triton, *MODELS)
    session, _, _ = guarded_session(target)
    scraper = TargetScraper(target, 5.0, session=session)
    quiet(real_triton, *MODELS)
    try:
        first = scraper.scrape_once()
        before = {model: http_statistics(real_triton, model) for model in MODELS}
        with ThreadPoolExecutor(8) as pool:  # concurrent: batches of several sizes
            list(pool.map(lambda i: send(grpc_client, "batching", 1 + i % 3), range(24)))
        for _ in range(3):
            send(grpc_client, "slow_queue")
        for model, sent in (("batching", 24), ("slow_queue", 3)):
            settle(real_triton, model, before[model].success_count + sent)
        second = scraper.scrape_once()
        after = {model: http_statistics(real_triton, model) for model in MODELS}
        state = scraper.state()
    finally:
        scraper.close()
    for outcome in (first, second):
        assert outcome.sources[ScrapeSource.STATS].status is FetchStatus.SUCCESS
    assert first.sources[ScrapeSource.CONFIG].status is FetchStatus.SUCCESS
    grown: dict[str, dict[int, int]] = {}
    for model in MODELS:
        batches = state.models[model].batches
        assert batches is not None
        was = before[model].batch_executions
        grown[model] = {
            size: count - was.get(size, 0)
            for size, count in after[model].batch_executions.items()
            if count > was.get(size, 0)
        }
        executed = {
            size: round(rate * batches.interval_seconds)
            for size, rate in batches.executions_per_second_by_size.items()
            if rate > 0
        }
        assert executed == grown[model]  # the same executions per batch size as HTTP's
        config = state.models[model].config
        assert config is not None
        assert dict(config.raw) == real_triton.config(model)  # the whole document
    assert grown["slow_queue"] == {1: 3}  # one at a time
    rows = sum(size * count for size, count in grown["batching"].items())
    assert rows == sum(1 + i % 3 for i in range(24))
    slow = state.models["slow_queue"].config
    fast = state.models["batching"].config
    assert slow is not None and fast is not None
    assert slow.dynamic_batching is not None and fast.dynamic_batching is not None
    assert slow.dynamic_batching.max_queue_delay_microseconds == 30000
    assert fast.dynamic_batching.max_queue_delay_microseconds == 100
    assert slow.max_batch_size == fast.max_batch_size == 8
    assert [(g.kind, g.count) for g in slow.instance_groups] == [("KIND_CPU", 1)]


def test_grpc_statistics_records_equal_the_http_ones(
    real_triton: RealTriton, grpc_client: grpcclient.InferenceServerClient
) -> None:
    """Breaks if one count or batch size read over gRPC differs from the HTTP API's."""
    quiet(real_triton, *MODELS)
    done = http_statistics(real_triton, "batching").success_count
    for rows in (1, 2, 5):
        send(grpc_client, "batching", rows)
    settle(real_triton, "batching", done + 3)
    quiet(real_triton, *MODELS)
    apis = ModelApiClient(ApiEndpoint(real_triton.grpc_url, "grpc"))
    try:
        for model in MODELS:
            answer = apis.statistics(model, deadline=time.monotonic() + 5)
            assert answer.ok, answer.error
            over_grpc = parse_model_statistics(answer.document, model, "", 0.0)
            assert counts(over_grpc) == counts(http_statistics(real_triton, model))
    finally:
        apis.close()


def test_the_http_api_is_never_asked(
    real_triton: RealTriton, grpc_client: grpcclient.InferenceServerClient
) -> None:
    """Breaks if anything but /metrics goes over HTTP for a grpc:// target: its guessed
    HTTP port is closed, and statistics and config still arrive."""
    target = grpc_target(real_triton, "slow_queue")
    session, refused, answered = guarded_session(target)
    scraper = TargetScraper(target, 5.0, session=session)
    try:
        outcomes = [scraper.scrape_once()]
        send(grpc_client, "slow_queue")
        outcomes.append(scraper.scrape_once())
    finally:
        scraper.close()
    assert [{s: o.status for s, o in outcome.sources.items()} for outcome in outcomes] == [
        dict.fromkeys(ScrapeSource, FetchStatus.SUCCESS),
        {ScrapeSource.METRICS: FetchStatus.SUCCESS, ScrapeSource.STATS: FetchStatus.SUCCESS},
    ]
    assert refused.asked == []
    assert answered == [real_triton.metrics_url] * 2


def test_slow_queue_has_a_queue_bound_breakdown_over_grpc(
    real_triton: RealTriton, grpc_client: grpcclient.InferenceServerClient
) -> None:
    """Breaks if a grpc:// target loses the breakdown or the queue finding: under light
    load slow_queue's batcher holds every request its whole 30 ms delay."""
    target = grpc_target(real_triton, "slow_queue")
    session, _, _ = guarded_session(target)
    scraper = TargetScraper(target, 5.0, session=session)
    try:
        scraper.scrape_once()
        done = http_statistics(real_triton, "slow_queue").success_count
        for _ in range(8):  # one at a time: the batch of 8 never fills
            send(grpc_client, "slow_queue")
        settle(real_triton, "slow_queue", done + 8)
        scraper.scrape_once()
        state = judge_target(scraper.state()).models["slow_queue"]
    finally:
        scraper.close()
    assert state.config is not None and state.config.dynamic_batching is not None
    delay_seconds = state.config.dynamic_batching.max_queue_delay_microseconds / 1e6
    assert state.breakdown is not None and state.bottleneck is not None
    assert state.bottleneck.kind == "queue-bound"
    stages = state.breakdown.stages()
    assert max(stages, key=lambda stage: stages[stage]) == "queue"
    assert state.breakdown.queue >= 0.8 * delay_seconds  # the batcher waited its delay
    assert state.batches is not None
    assert {s for s, r in state.batches.executions_per_second_by_size.items() if r} == {1}


def test_an_unknown_model_is_a_grpc_error_and_keeps_the_apis(real_triton: RealTriton) -> None:
    """Breaks if real Triton's answer for a model it does not know (statistics
    INVALID_ARGUMENT, config NOT_FOUND) switches an API off or fails the other model."""
    scraper = TargetScraper(grpc_target(real_triton, "slow_queue", "missing"), 5.0)
    try:
        outcomes = [scraper.scrape_once() for _ in range(2)]
    finally:
        scraper.close()
    for outcome in outcomes:
        stats = outcome.sources[ScrapeSource.STATS]
        assert stats.status is FetchStatus.GRPC_ERROR
        assert stats.error.startswith("missing: gRPC INVALID_ARGUMENT")
    config = outcomes[0].sources[ScrapeSource.CONFIG]
    assert config.status is FetchStatus.GRPC_ERROR
    assert config.error.startswith("missing: gRPC NOT_FOUND")
    assert scraper.state().models["slow_queue"].config is not None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_grpcs_statistics_and_config_use_the_targets_tls(
    start_real_triton: Callable[..., RealTriton], pki: Pki
) -> None:
    """Breaks if the gRPC statistics and config calls ignore ``tls``: Triton's own
    mutual TLS takes them with the client certificate and refuses them without.

    A private server: TLS is a flag of the whole gRPC endpoint, and on the session's
    server it would refuse every other test's plaintext gRPC."""
    server = start_real_triton(
        "slow_queue",
        extra_args=[
            "--grpc-use-ssl=true",
            "--grpc-use-ssl-mutual=true",
            f"--grpc-server-cert={pki.server_cert}",
            f"--grpc-server-key={pki.server_key}",
            f"--grpc-root-cert={pki.ca}",
        ],
    )
    url = server.grpc_url.replace("grpc://", "grpcs://")
    trust = {"ca_file": str(pki.ca)}
    mutual = {**trust, "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    outcomes = {}
    for name, tls in (("mutual", mutual), ("no client certificate", trust)):
        scraper = TargetScraper(grpc_target(server, "slow_queue", url=url, tls=tls), 5.0)
        outcomes[name] = scraper.scrape_once().sources
        if name == "mutual":
            config = scraper.state().models["slow_queue"].config
            assert config is not None and config.max_batch_size == 8
        scraper.close()
    assert outcomes["mutual"][ScrapeSource.STATS].ok and outcomes["mutual"][ScrapeSource.CONFIG].ok
    for source in (ScrapeSource.STATS, ScrapeSource.CONFIG):
        assert outcomes["no client certificate"][source].status is FetchStatus.CONNECTION_ERROR


def test_the_daemon_recommends_lowering_slow_queues_delay(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Breaks if the daemon, watching slow_queue through a grpc:// target with a 10 ms
    budget, does not export lower_queue_delay (30000 µs → 15000 µs): the config that
    says the batcher waits must come over gRPC."""
    config = tmp_path / "tritonwatch.yaml"
    config.write_text(
        f"""
targets:
  - name: real
    url: {real_triton.grpc_url}
    metrics_url: {real_triton.metrics_url}
    models:
      - name: slow_queue
        slo: {{latency: {{threshold: 10ms}}}}
canary: {{rate: 10/s, protocol: grpc, timeout: 1s}}
scrape: {{interval: 1s, timeout: 800ms}}
alerting: {{evaluation_interval: 1s}}
advisor: {{window: 8s}}
"""
    )
    daemon = DaemonProcess(config)
    labels = [("target", "real"), ("model", "slow_queue"), ("action", "lower_queue_delay")]

    def recommended() -> str | None:
        page = daemon.metrics()
        return page if sample_value(page, "tritonwatch_recommendation", labels) == 1 else None

    try:
        text = wait_until(recommended, 45, "lower_queue_delay for slow_queue", every=0.5)
        advice = daemon.wait_for_event("recommendation", action="lower_queue_delay")
    finally:
        daemon.stop()
    for source in ("metrics", "stats", "config"):
        health = [("target", "real"), ("source", source)]
        assert sample_value(text, "tritonwatch_scrape_success", health) == 1
    assert (advice["current"], advice["proposed"]) == (30000, 15000)
    assert advice["evidence"]["latency_budget_seconds"] == 0.01
