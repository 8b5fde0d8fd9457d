"""One statistics request a cycle for every model, on real Triton 2.51 (HTTP and gRPC), and
on real MLServer, whose answer to ``GET /v2/models/stats`` is not a statistics answer.

Triton answers ``GET /v2/models/stats`` and ``ModelStatistics`` with no name from the
same ready versions as the per-model form; these tests hold the scraper to that: one
request, and every model's counts exactly what its own ``GET /v2/models/{m}/stats`` says.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from structlog.testing import capture_logs

from real_mlserver import ECHO_MODEL, RealMLServer
from real_triton import RealTriton
from support import wait_until
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.observations import ModelKey, ModelStatistics
from tritonwatch.records.target_state import FetchStatus, ScrapeSource
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.scrape.triton_stats import parse_all_model_statistics, parse_model_statistics
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import ApiEndpoint

pytestmark = pytest.mark.real

PROTOCOLS = ("http", "grpc")


def target(url: str, metrics_url: str, *models: str | dict[str, str]) -> TargetConfig:
    """A target on ``url``: over gRPC (a ``grpc://`` url, no http_url) or HTTP."""
    listed = [model if isinstance(model, dict) else {"name": model} for model in models]
    return TargetConfig.model_validate(
        {"name": "real", "url": url, "metrics_url": metrics_url, "models": listed}
    )


def triton_target(server: RealTriton, protocol: str, *models: str | dict[str, str]) -> TargetConfig:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    return target(url, server.metrics_url, *models)


def own_answer(server: RealTriton, model: str) -> ModelStatistics:
    """The model's own ``GET /v2/models/{m}/stats``, read as the scraper reads it."""
    status, body = server.request("GET", f"/v2/models/{model}/stats")
    assert status == 200, body
    return parse_model_statistics(json.loads(body), model, "", 0.0)


def counts(stats: ModelStatistics) -> tuple[int, int, int, dict[int, int]]:
    return (
        stats.inference_count,
        stats.execution_count,
        stats.success_count,
        dict(stats.batch_executions),
    )


def quiet(server: RealTriton) -> None:
    """Waits until no request of an earlier test is still to be counted."""

    def unchanged() -> bool:
        first = [counts(own_answer(server, model)) for model in server.models]
        time.sleep(0.1)
        return first == [counts(own_answer(server, model)) for model in server.models]

    wait_until(unchanged, 15, "the statistics of every model to stop changing")


class StatisticsCalls:
    """Counts the scraper's statistics requests: the HTTP paths its session is answered
    on, and the model name of every gRPC ``ModelStatistics`` call ("" is every model)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.session = requests.Session()
        self.asked: list[str] = []
        self.session.hooks["response"].append(self._answered)
        real = grpcclient.InferenceServerClient.get_inference_statistics

        def counting(client: Any, model_name: str = "", *args: Any, **kwargs: Any) -> Any:
            self.asked.append(f"ModelStatistics({model_name!r})")
            return real(client, model_name, *args, **kwargs)

        monkeypatch.setattr(grpcclient.InferenceServerClient, "get_inference_statistics", counting)

    def _answered(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        path = requests.utils.urlparse(response.url).path
        if path.endswith("/stats"):
            self.asked.append(path)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> StatisticsCalls:
    return StatisticsCalls(monkeypatch)


def all_models_request(protocol: str) -> str:
    return "ModelStatistics('')" if protocol == "grpc" else "/v2/models/stats"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_all_models_answer_equals_every_models_own(
    real_triton: RealTriton, protocol: str
) -> None:
    """Breaks if a model read out of real Triton's all-models answer (HTTP, or gRPC with
    no name) differs in one count or batch size from its own statistics answer, or if
    the answer does not list every loaded model."""
    quiet(real_triton)
    url = real_triton.grpc_url if protocol == "grpc" else real_triton.http_url
    apis = ModelApiClient(ApiEndpoint(url, "grpc" if protocol == "grpc" else "http"))
    try:
        answer = apis.all_statistics(deadline=time.monotonic() + 5)
    finally:
        apis.close()
    assert answer.ok, answer.error
    keys = [ModelKey(model, "") for model in real_triton.models]
    parsed, malformed = parse_all_model_statistics(answer.document, keys, 0.0)
    assert malformed == {}
    assert {entry["name"] for entry in answer.document["model_stats"]} == set(real_triton.models)
    for model in real_triton.models:
        assert counts(parsed[model]) == counts(own_answer(real_triton, model)), model


def send(client: grpcclient.InferenceServerClient, model: str, rows: int = 1) -> None:
    tensor = grpcclient.InferInput("INPUT0", [rows, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, 16), np.float32))
    client.infer(model, [tensor])


def settle(server: RealTriton, model: str, successes: int) -> None:
    """Waits until Triton counts ``successes`` (it counts a request when it is released,
    just after its answer)."""
    wait_until(
        lambda: own_answer(server, model).success_count >= successes,
        10,
        f"{model}'s statistics to count {successes} requests",
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_one_request_a_cycle_and_every_models_executions_as_its_own_answer(
    real_triton: RealTriton, calls: StatisticsCalls, protocol: str
) -> None:
    """Breaks if the scraper asks real Triton for statistics more than once a cycle for
    all its models, or if any model's executions per batch size over the window differ
    from the difference of its own statistics answers."""
    models = real_triton.models
    scraper = TargetScraper(
        triton_target(real_triton, protocol, *models), 5.0, session=calls.session
    )
    client = grpcclient.InferenceServerClient(real_triton.grpc_address)
    quiet(real_triton)
    try:
        first = scraper.scrape_once()
        before = {model: own_answer(real_triton, model) for model in models}
        with ThreadPoolExecutor(8) as pool:  # concurrent: batches of several sizes
            list(pool.map(lambda i: send(client, "batching", 1 + i % 3), range(24)))
        for _ in range(3):
            send(client, "slow_queue")
        for model, sent in (("batching", 24), ("slow_queue", 3)):
            settle(real_triton, model, before[model].success_count + sent)
        second = scraper.scrape_once()
        after = {model: own_answer(real_triton, model) for model in models}
        state = scraper.state()
    finally:
        client.close()
        scraper.close()
    for outcome in (first, second):
        assert outcome.sources[ScrapeSource.STATS].status is FetchStatus.SUCCESS
    assert calls.asked == [all_models_request(protocol)] * 2
    executed: dict[str, dict[int, int]] = {}
    for model in models:
        batches = state.models[model].batches
        assert batches is not None, model
        was = before[model].batch_executions
        grown = {
            size: count - was.get(size, 0)
            for size, count in after[model].batch_executions.items()
            if count > was.get(size, 0)
        }
        executed[model] = {
            size: round(rate * batches.interval_seconds)
            for size, rate in batches.executions_per_second_by_size.items()
            if rate > 0
        }
        assert executed[model] == grown, model
    assert executed["slow_queue"] == {1: 3}
    assert sum(size * n for size, n in executed["batching"].items()) == sum(
        1 + i % 3 for i in range(24)
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_or_version_triton_lacks_fails_as_when_asked_alone(
    real_triton: RealTriton, calls: StatisticsCalls, protocol: str
) -> None:
    """Breaks if a configured model (or version) real Triton does not have is reported
    otherwise than its own statistics request reports it, or fails the other model."""
    config = triton_target(
        real_triton,
        protocol,
        "batching",
        {"name": "missing"},
        {"name": "slow_queue", "version": "7"},
    )
    scraper = TargetScraper(config, 5.0, session=calls.session)
    try:
        outcome = scraper.scrape_once()
    finally:
        scraper.close()
    stats = outcome.sources[ScrapeSource.STATS]
    if protocol == "grpc":
        assert stats.status is FetchStatus.GRPC_ERROR
        assert stats.error.startswith("missing: gRPC INVALID_ARGUMENT")
        alone = ["ModelStatistics('missing')", "ModelStatistics('slow_queue')"]
    else:
        assert (stats.status, stats.error) == (FetchStatus.HTTP_ERROR, "missing: HTTP 400")
        alone = ["/v2/models/missing/stats", "/v2/models/slow_queue/versions/7/stats"]
    assert calls.asked == [all_models_request(protocol), *alone]
    assert scraper.state().failures[(ScrapeSource.STATS, stats.status)] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mlserver_has_no_statistics_api_and_is_not_failed_for_it(
    real_mlserver: RealMLServer, calls: StatisticsCalls, protocol: str
) -> None:
    """Breaks if MLServer's answer to the all-models form (HTTP: its metadata route's 404
    for a model called "stats", with an {"error": ...} body; gRPC: UNIMPLEMENTED) is
    counted as a failure every cycle instead of switching the statistics API off."""
    url = real_mlserver.grpc_url if protocol == "grpc" else real_mlserver.http_url
    config = target(url, real_mlserver.metrics_url, ECHO_MODEL)
    scraper = TargetScraper(config, 5.0, session=calls.session)
    try:
        with capture_logs() as logs:
            outcomes = [scraper.scrape_once() for _ in range(3)]
    finally:
        scraper.close()
    assert all(ScrapeSource.STATS not in outcome.sources for outcome in outcomes)
    off = [line["source"] for line in logs if line["event"] == "scrape_feature_unsupported"]
    assert "stats" in off
    assert not [failure for failure in scraper.state().failures if failure[0] is ScrapeSource.STATS]
    one = "ModelStatistics('echo')" if protocol == "grpc" else f"/v2/models/{ECHO_MODEL}/stats"
    assert calls.asked == [all_models_request(protocol), one]  # then off, for an hour
