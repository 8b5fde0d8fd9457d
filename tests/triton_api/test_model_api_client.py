"""The model API client against servers that lack the APIs, fail, or answer oddly.

HTTP against a loopback stub (a bare 404 for every unknown GET, the standard library's
501 page for every POST: a server without the APIs), gRPC against an in-process
``grpcio`` server with Triton's service whose every method is ``UNIMPLEMENTED`` unless
a test scripts it. The same client against real Triton and real MLServer is in
tests/triton/test_model_api_real_triton.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from stub_server import Route, StubServer
from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.target_state import FetchStatus
from tritonwatch.triton_api.answer import ApiAnswer, ApiError
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import ApiEndpoint, target_endpoint

UNKNOWN_MODEL = b'{"error":"Request for unknown model: \'m\' is not found"}'
"""Triton's answer for a model it does not know: the API exists."""


class ScriptedTriton(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """A real gRPC server with Triton's service: every method the base class leaves
    ``UNIMPLEMENTED`` (a server without the APIs) unless ``config`` is given, which
    ``ModelConfig`` then answers."""

    def __init__(self, config: model_config_pb2.ModelConfig | None = None) -> None:
        self.config = config
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self, self.server)
        self.url = f"grpc://127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def ModelConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        if self.config is None:
            return super().ModelConfig(request, context)
        return service_pb2.ModelConfigResponse(config=self.config)

    def close(self) -> None:
        self.server.stop(grace=None)


@pytest.fixture
def http_client(stub: StubServer) -> Iterator[ModelApiClient]:
    client = ModelApiClient(ApiEndpoint(stub.url), timeout=5.0)
    yield client
    client.close()


@pytest.fixture
def scripted() -> Iterator[ScriptedTriton]:
    server = ScriptedTriton()
    yield server
    server.close()


def every_call(client: ModelApiClient) -> dict[str, Callable[[], ApiAnswer]]:
    """Each API of the client, asked about model ``m``."""
    return {
        "server_metadata": client.server_metadata,
        "model_metadata": lambda: client.model_metadata("m"),
        "model_config": lambda: client.model_config("m", "1"),
        "statistics": lambda: client.statistics("m"),
        "all_statistics": client.all_statistics,
        "repository_index": lambda: client.repository_index(ready_only=True),
        "load": lambda: client.load("m", {"max_batch_size": 8}),
        "unload": lambda: client.unload("m"),
    }


def test_an_http_server_without_the_apis_says_so_for_each(
    stub: StubServer, http_client: ModelApiClient
) -> None:
    """Breaks if a bare 404 (GET) or 501 (POST) is not read as the API missing, or a
    missing optional API is not None for the caller that can do without it."""
    answers = {name: ask() for name, ask in every_call(http_client).items()}
    posts = {"repository_index", "load", "unload"}
    assert {name: a.missing_api for name, a in answers.items()} == {
        name: {"http_status": 501 if name in posts else 404} for name in answers
    }
    assert {a.status for a in answers.values()} == {FetchStatus.HTTP_ERROR}
    assert answers["model_config"].document_unless_missing() is None
    with pytest.raises(ApiError) as raised:
        answers["model_metadata"].document_or_raise()
    assert (raised.value.status, str(raised.value)) == (FetchStatus.HTTP_ERROR, "HTTP 404")
    assert stub.requests == [
        "/v2",
        "/v2/models/m",
        "/v2/models/m/versions/1/config",
        "/v2/models/m/stats",
        "/v2/models/stats",
    ]


def test_tritons_error_body_is_a_failure_not_a_missing_api(
    stub: StubServer, http_client: ModelApiClient
) -> None:
    """Breaks if Triton's ``{"error": ...}`` answer for a model it does not know reads as
    the server lacking the API, or its words are lost."""
    stub.routes["/v2/models/m/versions/1/config"] = Route(400, UNKNOWN_MODEL)
    answer = http_client.model_config("m", "1")
    assert (answer.status, answer.http_status, answer.missing_api) == (
        FetchStatus.HTTP_ERROR,
        400,
        None,
    )
    assert answer.message == "Request for unknown model: 'm' is not found"
    with pytest.raises(ApiError) as raised:
        answer.document_unless_missing()
    assert str(raised.value) == "HTTP 400: Request for unknown model: 'm' is not found"


def test_an_answer_of_the_wrong_shape_is_a_bad_response(
    stub: StubServer, http_client: ModelApiClient
) -> None:
    """Breaks if a document that is not JSON, or not the JSON type of its API, passes."""
    stub.routes["/v2/models/m"] = Route(body=b"[1, 2]")
    stub.routes["/v2/models/m/stats"] = Route(body=b"<html>")
    stub.routes["/v2/models/m/config"] = Route(body=b'{"max_batch_size": 8}')
    listed = http_client.model_metadata("m")
    assert (listed.status, listed.error) == (
        FetchStatus.BAD_RESPONSE,
        "model_metadata: expected a JSON dict, got list",
    )
    assert http_client.statistics("m").status is FetchStatus.BAD_RESPONSE
    config = http_client.model_config("m")
    assert (config.status, config.document) == (FetchStatus.SUCCESS, {"max_batch_size": 8})


@pytest.mark.parametrize(
    ("status", "expected"),
    [(200, (FetchStatus.SUCCESS, True)), (400, (FetchStatus.SUCCESS, False)),
     (503, (FetchStatus.HTTP_ERROR, None))],
)  # fmt: skip
def test_model_readiness_is_the_status(
    stub: StubServer, http_client: ModelApiClient, status: int, expected: tuple[Any, Any]
) -> None:
    """Breaks if a ready model is not True, Triton's bare 400 for one that is not ready
    is not False, or a failing server reads as an answer."""
    stub.routes["/v2/models/m/ready"] = Route(status)
    answer = http_client.model_ready("m")
    assert (answer.status, answer.document) == expected


def test_no_time_left_sends_nothing(stub: StubServer, scripted: ScriptedTriton) -> None:
    """Breaks if a call whose deadline has passed still goes out, over either protocol."""
    for endpoint in (ApiEndpoint(stub.url), ApiEndpoint(scripted.url, "grpc")):
        client = ModelApiClient(endpoint)
        answer = client.model_config("m", deadline=time.monotonic() - 1)
        client.close()
        assert (answer.status, answer.error) == (FetchStatus.TIMEOUT, "no time left in this scrape")
    assert stub.requests == []


def test_nothing_listening_is_a_connection_error(closed_url: str) -> None:
    """Breaks if a refused connection raises, or is any other outcome, on either protocol."""
    grpc_url = closed_url.replace("http://", "grpc://")
    for endpoint in (ApiEndpoint(closed_url), ApiEndpoint(grpc_url, "grpc")):
        client = ModelApiClient(endpoint, timeout=5.0)
        answer = client.model_metadata("m")
        client.close()
        assert answer.status is FetchStatus.CONNECTION_ERROR, answer
        assert answer.missing_api is None
        assert answer.grpc_code == ("UNAVAILABLE" if endpoint.protocol == "grpc" else None)


def test_a_grpc_server_without_the_apis_says_so_for_each(scripted: ScriptedTriton) -> None:
    """Breaks if ``UNIMPLEMENTED`` is not read as the API missing for any call, or the
    missing config is not None for the caller that can do without it."""
    client = ModelApiClient(ApiEndpoint(scripted.url, "grpc"), timeout=5.0)
    try:
        answers = {name: ask() for name, ask in every_call(client).items()}
    finally:
        client.close()
    for name, answer in answers.items():
        assert answer.missing_api == {"grpc_status": "UNIMPLEMENTED"}, name
        assert (answer.status, answer.grpc_code) == (FetchStatus.GRPC_ERROR, "UNIMPLEMENTED")
        assert answer.error.startswith("gRPC UNIMPLEMENTED: "), answer.error
    assert answers["model_config"].document_unless_missing() is None


def test_a_grpc_answer_over_max_bytes_is_too_large() -> None:
    """Breaks if the size cap does not hold for gRPC answers: the same config is read
    whole under a cap it fits in, and is ``too_large`` under one it does not."""
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8, backend="python" * 20)
    server = ScriptedTriton(config)
    try:
        answers = []
        for cap in (4096, 64):
            client = ModelApiClient(ApiEndpoint(server.url, "grpc"), max_bytes=cap, timeout=5.0)
            answers.append(client.model_config("m"))
            client.close()
    finally:
        server.close()
    fits, too_large = answers
    assert fits.ok and fits.document["max_batch_size"] == 8
    assert fits.document["backend"] == "python" * 20
    assert too_large.status is FetchStatus.TOO_LARGE
    assert "RESOURCE_EXHAUSTED" in too_large.error


def test_a_tls_file_gone_since_the_check_is_a_connection_error(tmp_path: Path) -> None:
    """Breaks if an unreadable CA file raises out of the call instead of being an outcome."""
    gone = ClientTLS(ca_file=tmp_path / "deleted-ca.pem")
    client = ModelApiClient(ApiEndpoint("grpcs://127.0.0.1:1", "grpc", gone))
    answer = client.statistics("m")
    client.close()
    assert answer.status is FetchStatus.CONNECTION_ERROR
    assert "deleted-ca.pem" in answer.error


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"url": "http://t:8000"}, ("http://t:8000", "http")),
        ({"url": "grpc://t:8001"}, ("grpc://t:8001", "grpc")),
        ({"url": "grpcs://t:8001"}, ("grpcs://t:8001", "grpc")),
        ({"url": "grpc://t:8001", "http_url": "http://t:9000"}, ("http://t:9000", "http")),
        ({"url": "http://t:8000", "grpc_url": "grpc://t:9001"}, ("http://t:8000", "http")),
    ],
)
def test_only_a_target_reachable_by_grpc_alone_is_asked_over_grpc(
    settings: dict[str, str], expected: tuple[str, str]
) -> None:
    """Breaks if a target with an HTTP API is asked over gRPC, or a gRPC-only one at a
    guessed HTTP port."""
    endpoint = target_endpoint(TargetConfig.model_validate({"name": "t", **settings}))
    assert (endpoint.url, endpoint.protocol) == expected
    assert ModelApiClient(endpoint).protocol == expected[1]
