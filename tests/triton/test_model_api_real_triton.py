"""The model API client against real Triton 2.51 (HTTP and gRPC) and real MLServer 1.7.1.

Over both protocols every answer must be what Triton's own HTTP API answers (the gRPC
ones converted), so the canary, the sweep, discovery, the scrapers and ``tune`` read one
shape. MLServer is a KServe v2 server without Triton's extensions: the client must say
that it lacks the config API (so the canary runs without a config) and still read the
metadata.

On the session's server, which holds every test model: the test that reloads a model
unloads it and loads it from its files again at the end, so the next test finds it as
it was.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest

from real_mlserver import ECHO_MODEL, RealMLServer
from real_triton import RealTriton
from support import wait_until
from tritonwatch.records.target_state import FetchStatus
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import ApiEndpoint

pytestmark = pytest.mark.real

PROTOCOLS = ("http", "grpc")
MODEL = "batching"
RELOADED = "waiting_cpu"


def own_answer(server: RealTriton, method: str, path: str, body: object = None) -> object:
    """What Triton's HTTP API answers, read without the client."""
    status, answer = server.request(method, path, body)
    assert status == 200, answer
    return json.loads(answer)


@pytest.fixture(params=PROTOCOLS)
def client(request: pytest.FixtureRequest, real_triton: RealTriton) -> Iterator[ModelApiClient]:
    """The client of the session's Triton over HTTP, then over gRPC."""
    protocol = request.param
    url = real_triton.grpc_url if protocol == "grpc" else real_triton.http_url
    api = ModelApiClient(ApiEndpoint(url, protocol), timeout=30.0)
    yield api
    api.close()


def test_metadata_and_config_are_tritons_http_answers(
    client: ModelApiClient, real_triton: RealTriton
) -> None:
    """Breaks if the server's or a model's metadata, or a model's config, differs in one
    field from Triton's HTTP answer (over gRPC: a field converted wrongly or left out)."""
    server = client.server_metadata()
    assert server.ok, server.error
    assert server.document == own_answer(real_triton, "GET", "/v2")
    assert {"model_repository", "statistics", "binary_tensor_data"} <= set(
        server.document["extensions"]
    )
    metadata = client.model_metadata(MODEL)
    assert metadata.document == own_answer(real_triton, "GET", f"/v2/models/{MODEL}")
    assert [tensor["name"] for tensor in metadata.document["inputs"]] == ["INPUT0"]
    config = client.model_config(MODEL, "1")
    assert config.ok, config.error
    assert config.document == real_triton.config(MODEL)
    assert config.document["dynamic_batching"]["max_queue_delay_microseconds"] == 100


def test_statistics_are_tritons_http_answers(
    client: ModelApiClient, real_triton: RealTriton
) -> None:
    """Breaks if one model's statistics, or any entry of every model's, differ from
    Triton's HTTP answer, or the all-models answer leaves out a loaded model (no test
    sends to ``batching`` while this one runs: the counts stand still)."""
    one = client.statistics(MODEL)
    assert one.ok, one.error
    (entry,) = one.document["model_stats"]
    assert entry == real_triton.stats(MODEL)
    every = client.all_statistics()
    assert every.ok, every.error
    by_name = {entry["name"]: entry for entry in every.document["model_stats"]}
    assert set(by_name) == set(real_triton.models)
    assert by_name[MODEL] == entry


def test_the_repository_index_lists_every_model(
    client: ModelApiClient, real_triton: RealTriton
) -> None:
    """Breaks if the index (a list of rows, over gRPC too) differs from Triton's HTTP
    answer in a name, version or state, or READY-only lists one that is not ready."""
    index = client.repository_index()
    assert index.ok, index.error
    rows = {(row["name"], row["version"], row["state"]) for row in index.document}
    own = own_answer(real_triton, "POST", "/v2/repository/index", {})
    assert isinstance(own, list)
    assert rows == {(row["name"], row["version"], row["state"]) for row in own}
    assert {name for name, _, state in rows if state == "READY"} == set(real_triton.models)
    ready = client.repository_index(ready_only=True)
    assert sorted(row["name"] for row in ready.document) == sorted(real_triton.models)


def test_unknown_model_is_a_failure_with_tritons_words(client: ModelApiClient) -> None:
    """Breaks if a model Triton does not know reads as the API missing (the canary would
    run without a config), or Triton's message is lost."""
    for answer in (client.model_metadata("no_such_model"), client.model_config("no_such_model")):
        assert answer.status in (FetchStatus.HTTP_ERROR, FetchStatus.GRPC_ERROR)
        assert answer.missing_api is None
        assert "no_such_model" in answer.message
    assert client.model_ready("no_such_model").document is False


def test_load_with_a_config_then_unload_and_load_from_the_files(
    client: ModelApiClient, real_triton: RealTriton
) -> None:
    """Breaks if a load does not apply its config override, an unload does not take the
    model away, or a plain load after it does not bring back the files' config."""
    files = real_triton.config(RELOADED)
    changed = copy.deepcopy(files)
    changed["instance_group"][0]["count"] = 2
    try:
        loaded = client.load(RELOADED, changed)
        assert (loaded.status, loaded.document) == (FetchStatus.SUCCESS, None)
        assert client.model_ready(RELOADED).document is True
        assert client.model_config(RELOADED).document["instance_group"][0]["count"] == 2
        assert client.unload(RELOADED).ok
        wait_until(
            lambda: client.model_ready(RELOADED).document is False, 30, f"{RELOADED} unloaded"
        )
        wait_until(
            lambda: RELOADED not in {row["name"] for row in _unloading(client)},
            30,
            f"{RELOADED} done unloading",
        )
        assert client.load(RELOADED).ok
        assert client.model_ready(RELOADED).document is True
        assert client.model_config(RELOADED).document == files
    finally:
        real_triton.reset(RELOADED)


def _unloading(client: ModelApiClient) -> list[dict[str, str]]:
    index = client.repository_index()
    assert index.ok, index.error
    return [row for row in index.document if row["state"] == "UNLOADING"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mlserver_lacks_the_config_api_and_answers_metadata(
    real_mlserver: RealMLServer, protocol: str
) -> None:
    """Breaks if MLServer's answer to the config API (it has none) is a failure rather
    than the API missing, or its model's metadata cannot be read."""
    url = real_mlserver.grpc_url if protocol == "grpc" else real_mlserver.http_url
    client = ModelApiClient(ApiEndpoint(url, protocol), timeout=30.0)
    try:
        config = client.model_config(ECHO_MODEL)
        metadata = client.model_metadata(ECHO_MODEL)
        server = client.server_metadata()
    finally:
        client.close()
    assert config.missing_api is not None, config
    assert config.document_unless_missing() is None
    assert metadata.ok, metadata.error
    assert metadata.document["name"] == ECHO_MODEL
    expected = real_mlserver.json(f"/v2/models/{ECHO_MODEL}")
    if protocol == "grpc":
        del expected["parameters"]  # MLServer's HTTP extra: ModelMetadataResponse has none
    assert metadata.document == expected
    assert server.ok and server.document["extensions"] == []
