"""The statistics of every configured model in one request a cycle, and what its answer lacks.

Against the simulator with 20 models (HTTP and gRPC), and the stub server for answers a
server that is not Triton gives to ``GET /v2/models/stats``. Real Triton: in
tests/triton/test_statistics_one_request_real_triton.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sim_traffic import FakeClock
from structlog.testing import capture_logs

import support
from stub_server import Route, StubServer
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.observations import ModelStatistics
from tritonwatch.records.target_state import FetchStatus, ScrapeOutcome, ScrapeSource
from tritonwatch.scrape import api_switches
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.scrape.triton_stats import parse_model_statistics
from tritonwatch.sim.builtin import BUILTIN_MODEL_SET
from tritonwatch.sim.load import example_inputs
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

COUNT = 20
NAMES = [f"simple_{index:02d}" for index in range(COUNT)]
ENTRY = (
    b'{"name": "%s", "version": "1", "inference_count": %d, "execution_count": %d,'
    b' "batch_stats": [{"batch_size": 1, "compute_infer": {"count": %d, "ns": 1}}]}'
)


def clones(count: int = COUNT) -> ModelSet:
    """``count`` copies of the built-in ``simple`` (1 ms), spread over its three GPUs."""
    simple = next(m for m in BUILTIN_MODEL_SET["models"] if m["name"] == "simple")
    models = []
    for index in range(count):
        model = copy.deepcopy(simple)
        model["name"] = f"simple_{index:02d}"
        model["instance_group"] = {**model["instance_group"], "gpus": [index % 3]}
        models.append(model)
    return parse_model_set({"gpus": BUILTIN_MODEL_SET["gpus"], "models": models})


@pytest.fixture
def many() -> Iterator[Simulator]:
    """A simulator serving the 20 clones."""
    with Simulator(clones(), seed=0) as simulator:
        yield simulator


def target(url: str, metrics_url: str, *models: str | dict[str, str]) -> TargetConfig:
    listed = [model if isinstance(model, dict) else {"name": model} for model in models]
    return TargetConfig.model_validate(
        {"name": "t", "url": url, "metrics_url": metrics_url, "models": listed}
    )


def recording_session() -> tuple[requests.Session, list[str]]:
    """A session recording the path of every URL it is answered on."""
    session = requests.Session()
    asked: list[str] = []
    session.hooks["response"].append(
        lambda response, *a, **k: asked.append(requests.utils.urlparse(response.url).path)
    )
    return session, asked


def stats_paths(asked: Sequence[str]) -> list[str]:
    return [path for path in asked if path.endswith("/stats")]


def send(sim: Simulator, model_set: ModelSet, sizes: dict[str, list[int]]) -> None:
    """One request per listed batch size, one at a time, so each executes alone."""
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    try:
        for name, batch_sizes in sizes.items():
            spec = model_set.model(name)
            assert spec is not None
            for size in batch_sizes:
                tensors: list[Any] = []
                for tensor_name, (datatype, array) in example_inputs(spec, size).items():
                    tensor = httpclient.InferInput(tensor_name, list(array.shape), datatype)
                    tensor.set_data_from_numpy(array)
                    tensors.append(tensor)
                client.infer(name, tensors)
    finally:
        client.close()


def own_answer(sim: Simulator, name: str) -> ModelStatistics:
    """What the model's own ``GET /v2/models/{m}/stats`` says."""
    answer = requests.get(f"{sim.http_url}/v2/models/{name}/stats", timeout=5)
    assert answer.status_code == 200, answer.text
    return parse_model_statistics(answer.json(), name, "", 0.0)


def traffic() -> dict[str, list[int]]:
    """Every third model idle; the others 1–3 requests of sizes 1–4, differing by model."""
    return {
        name: [1 + (index + n) % 4 for n in range(1 + index % 3)]
        for index, name in enumerate(NAMES)
        if index % 3
    }


def assert_every_model_as_its_own_answer(
    scraper: TargetScraper, before: dict[str, ModelStatistics], after: dict[str, ModelStatistics]
) -> None:
    """Each model's executions per batch size over the window equal the difference of
    its own answers before and after."""
    for name in NAMES:
        batches = scraper.state().models[name].batches
        assert batches is not None, name
        executed = {
            size: round(rate * batches.interval_seconds)
            for size, rate in batches.executions_per_second_by_size.items()
            if rate
        }
        grown = {
            size: count - before[name].batch_executions.get(size, 0)
            for size, count in after[name].batch_executions.items()
            if count > before[name].batch_executions.get(size, 0)
        }
        assert executed == grown, name


def test_one_http_request_a_cycle_reads_all_20_models(many: Simulator, clock: FakeClock) -> None:
    """Breaks if the statistics of 20 models take more than one GET a cycle, or if any
    model's batch executions differ from what its own statistics answer says."""
    model_set = clones()
    session, asked = recording_session()
    scraper = TargetScraper(target(many.http_url, many.metrics_url, *NAMES), 5.0, clock, session)
    first = scraper.scrape_once()
    before = {name: own_answer(many, name) for name in NAMES}
    sent = traffic()
    send(many, model_set, sent)
    clock.advance(10.0)
    second = scraper.scrape_once()
    after = {name: own_answer(many, name) for name in NAMES}
    scraper.close()
    assert first.sources[ScrapeSource.STATS].ok and second.sources[ScrapeSource.STATS].ok
    assert stats_paths(asked) == ["/v2/models/stats"] * 2
    assert_every_model_as_its_own_answer(scraper, before, after)
    for name in NAMES:  # and the traffic really is what was sent
        expected: dict[int, int] = {}
        for size in sent.get(name, []):
            expected[size] = expected.get(size, 0) + 1
        batches = scraper.state().models[name].batches
        assert batches is not None
        rates = {s: r for s, r in batches.executions_per_second_by_size.items() if r}
        assert rates == pytest.approx({s: n / 10.0 for s, n in expected.items()})


def test_one_grpc_call_a_cycle_reads_all_20_models(
    many: Simulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a grpc:// target asks ModelStatistics once per model, or reads any
    model's batch executions differently from its own HTTP statistics answer."""
    names_asked: list[str] = []
    real = grpcclient.InferenceServerClient.get_inference_statistics

    def counting(self: Any, model_name: str = "", *args: Any, **kwargs: Any) -> Any:
        names_asked.append(model_name)
        return real(self, model_name, *args, **kwargs)

    monkeypatch.setattr(grpcclient.InferenceServerClient, "get_inference_statistics", counting)
    model_set = clones()
    grpc_target = target(f"grpc://{many.grpc_url}", many.metrics_url, *NAMES)
    scraper = TargetScraper(grpc_target, 5.0, clock)
    try:
        assert scraper.scrape_once().sources[ScrapeSource.STATS].ok
        before = {name: own_answer(many, name) for name in NAMES}
        send(many, model_set, traffic())
        clock.advance(10.0)
        assert scraper.scrape_once().sources[ScrapeSource.STATS].ok
        after = {name: own_answer(many, name) for name in NAMES}
    finally:
        scraper.close()
    assert names_asked == ["", ""]  # no name: every model, once a cycle
    assert_every_model_as_its_own_answer(scraper, before, after)


def per_model_scraper(config: TargetConfig, clock: FakeClock, **kwargs: Any) -> TargetScraper:
    """A scraper that asks every model alone, as each cycle did before the all-models read."""
    scraper = TargetScraper(config, 5.0, clock, **kwargs)
    scraper._all_statistics.off_since = 10**12  # never wanted again
    return scraper


def outcome_of(outcome: ScrapeOutcome) -> tuple[FetchStatus, str]:
    stats = outcome.sources[ScrapeSource.STATS]
    return stats.status, stats.error


@pytest.mark.parametrize(
    "missing",
    [
        pytest.param({"name": "absent"}, id="unknown-model"),
        pytest.param({"name": "simple_03", "version": "7"}, id="unknown-version"),
    ],
)
def test_a_configured_model_the_answer_lacks_fails_as_it_did_alone(
    many: Simulator, clock: FakeClock, missing: dict[str, str]
) -> None:
    """Breaks if a model missing from the all-models answer is reported differently from
    when each model was asked alone (Triton's 400 for it), or fails the other models."""
    config = target(many.http_url, many.metrics_url, "simple_00", missing, "simple_01")
    session, asked = recording_session()
    ours, alone = TargetScraper(config, 5.0, clock, session), per_model_scraper(config, clock)
    outcomes = []
    with capture_logs() as logs:
        for _ in range(2):
            outcomes.append((ours.scrape_once(), alone.scrape_once()))
            clock.advance(10.0)
    for mine, theirs in outcomes:
        assert outcome_of(mine) == outcome_of(theirs)
        assert outcome_of(mine)[0] is FetchStatus.HTTP_ERROR
        assert outcome_of(mine)[1] == f"{missing['name']}: HTTP 400"
    own = f"/v2/models/{missing['name']}"
    if "version" in missing:
        own += f"/versions/{missing['version']}"
    assert stats_paths(asked) == ["/v2/models/stats", f"{own}/stats"] * 2
    assert ours.state().failures[(ScrapeSource.STATS, FetchStatus.HTTP_ERROR)] == 2
    assert ours.state().models["simple_00"].batches is not None  # the others still read
    assert ours.state().models["simple_01"].batches is not None
    assert not [line for line in logs if "feature" in str(line["event"])]


def test_a_model_unloaded_and_loaded_again(many: Simulator, clock: FakeClock) -> None:
    """Breaks if an unloaded model is not asked about alone (its own "not available"
    failure), or if it is still asked alone once it is back."""
    session, asked = recording_session()
    scraper = TargetScraper(
        target(many.http_url, many.metrics_url, *NAMES[:3]), 5.0, clock, session
    )
    client = httpclient.InferenceServerClient(many.http_url.removeprefix("http://"))
    try:
        client.unload_model("simple_01")
        down = scraper.scrape_once()
        client.load_model("simple_01")
        back = scraper.scrape_once()
    finally:
        client.close()
        scraper.close()
    assert outcome_of(down) == (FetchStatus.HTTP_ERROR, "simple_01: HTTP 400")
    assert back.sources[ScrapeSource.STATS].ok
    assert stats_paths(asked) == [
        "/v2/models/stats",
        "/v2/models/simple_01/stats",
        "/v2/models/stats",
    ]


# -- servers whose all-models answer is not Triton's -------------------------------------


def stub_target(stub: StubServer, *models: str) -> TargetConfig:
    stub.routes["/metrics"] = Route(body=b"")
    return target(stub.url, f"{stub.url}/metrics", *models)


def events(logs: Sequence[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == name]


def test_mlservers_answer_switches_the_api_off_as_before(stub: StubServer) -> None:
    """Breaks if MLServer's answer to GET /v2/models/stats (the metadata route finding no
    model called "stats": 404 with an {"error": ...} body) reads as "model unknown" every
    cycle instead of the missing API its per-model 404 shows."""
    config = stub_target(stub, "echo", "other")
    stub.routes["/v2/models/stats"] = Route(404, b'{"error":"Model stats not found"}')
    scraper = TargetScraper(config, 2.0, FakeClock(), config_every=1000)
    with capture_logs() as logs:
        outcomes = [scraper.scrape_once() for _ in range(3)]
    assert all(ScrapeSource.STATS not in outcome.sources for outcome in outcomes)
    off = events(logs, "scrape_feature_unsupported")
    assert [(line["source"], line["http_status"]) for line in off] == [
        ("stats", 404),
        ("config", 404),
    ]
    assert not scraper.state().failures
    assert stats_paths(stub.requests) == ["/v2/models/stats", "/v2/models/echo/stats"]


@pytest.mark.parametrize(
    ("answer", "max_bytes"),
    [
        pytest.param(Route(404, b'{"error":"Model stats not found"}'), None, id="triton-like-404"),
        pytest.param(Route(200, b'{"name": "stats", "versions": []}'), None, id="other-document"),
        pytest.param(Route(200, b"<html>stats</html>"), None, id="not-json"),
        pytest.param(Route(200, b'{"model_stats": []}' + b" " * 4000), 2000, id="too-large"),
    ],
)
def test_an_unusable_all_models_answer_falls_back_to_one_request_per_model(
    stub: StubServer,
    monkeypatch: pytest.MonkeyPatch,
    answer: Route,
    max_bytes: int | None,
) -> None:
    """Breaks if a server whose per-model statistics work but whose all-models answer
    does not (not Triton's shape, or over max_bytes) loses its statistics, or is asked
    the all-models form every cycle instead of about once an hour."""
    monkeypatch.setattr(api_switches, "UNSUPPORTED_RECHECK_CYCLES", 3)
    config = stub_target(stub, "a", "b")
    stub.routes["/v2/models/stats"] = answer
    for count, name in enumerate(("a", "b"), start=1):
        stub.routes[f"/v2/models/{name}/stats"] = Route(
            body=b'{"model_stats": [%s]}' % (ENTRY % (name.encode(), count, count, count))
        )
    clock = FakeClock()
    extra = {"max_bytes": max_bytes} if max_bytes else {}
    scraper = TargetScraper(config, 2.0, clock, config_every=1000, **extra)
    with capture_logs() as logs:
        outcomes = []
        for _ in range(4):
            outcomes.append(scraper.scrape_once())
            clock.advance(15.0)
    assert all(outcome.sources[ScrapeSource.STATS].ok for outcome in outcomes)
    per_model = ["/v2/models/a/stats", "/v2/models/b/stats"]
    assert stats_paths(stub.requests) == [
        "/v2/models/stats",
        *per_model,
        *per_model,
        *per_model,
        "/v2/models/stats",  # asked again three cycles on
        *per_model,
    ]
    (logged,) = events(logs, "scrape_stats_per_model")  # once, not at every re-check
    assert logged["retry_after_cycles"] == 3
    assert [line["source"] for line in events(logs, "scrape_feature_unsupported")] == ["config"]
    assert not scraper.state().failures


def test_a_failing_all_models_request_is_the_cycles_failure(stub: StubServer) -> None:
    """Breaks if a 503 (the server failing, not lacking the form) makes every model be
    asked alone, or switches the all-models form off."""
    config = stub_target(stub, "a", "b")
    stub.routes["/v2/models/stats"] = Route(503, b"upstream down")
    scraper = TargetScraper(config, 2.0, FakeClock(), config_every=1000)
    outcomes = [scraper.scrape_once() for _ in range(2)]
    for outcome in outcomes:
        assert outcome_of(outcome) == (FetchStatus.HTTP_ERROR, "all models: HTTP 503")
    assert stats_paths(stub.requests) == ["/v2/models/stats"] * 2
    assert scraper.state().failures == {(ScrapeSource.STATS, FetchStatus.HTTP_ERROR): 2}


def test_a_malformed_entry_fails_its_model_only(stub: StubServer) -> None:
    """Breaks if one model's bad entry fails the others' statistics, or is asked about
    alone (its entry is there; it is what the server says)."""
    config = stub_target(stub, "a", "b")
    bad = b'{"name": "a", "version": "1", "execution_count": -1}'
    stub.routes["/v2/models/stats"] = Route(
        body=b'{"model_stats": [%s, %s]}' % (bad, ENTRY % (b"b", 2, 2, 2))
    )
    clock = FakeClock()
    scraper = TargetScraper(config, 2.0, clock, config_every=1000)
    scraper.scrape_once()
    clock.advance(10.0)
    outcome = scraper.scrape_once()
    assert outcome_of(outcome) == (
        FetchStatus.BAD_RESPONSE,
        "a: model_stats[0].execution_count must be a count, got: -1",
    )
    assert scraper.state().models["b"].batches is not None
    assert scraper.state().models["a"].batches is None
    assert stats_paths(stub.requests) == ["/v2/models/stats"] * 2


def test_the_cycle_deadline_holds_for_the_all_models_request(stub: StubServer) -> None:
    """Breaks if a stalled all-models answer outlasts the cycle, or is followed by one
    request per model with no time left."""
    config = stub_target(stub, "a", "b")
    stub.routes["/v2/models/stats"] = Route(stall=True)
    scraper = TargetScraper(config, 0.3, config_every=1000)
    started = time.monotonic()
    outcome = scraper.scrape_once()
    # The stalled answer is abandoned at the 0.3 s deadline: a smoke bound, 5x 0.4 s.
    support.assert_within_smoke_bound(time.monotonic() - started, 0.4, "a cycle with a stall")
    status, error = outcome_of(outcome)
    assert status is FetchStatus.TIMEOUT and error.startswith("all models: ")
    assert stats_paths(stub.requests) == ["/v2/models/stats"]
