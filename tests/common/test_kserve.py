"""The one model-URL builder, and every client that asks a server about a model using it:
the canary's HTTP client, the sweep's pre-encoded request, the scraper's model APIs and
model discovery all name a model under the same path, and the simulator reads it back."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tritonwatch.common.kserve import model_path
from tritonwatch.config.schema import TargetConfig
from tritonwatch.kserve.encoded import encode_http_infer
from tritonwatch.kserve.payload import Tensor
from tritonwatch.kserve.server_errors import ServerError
from tritonwatch.probe.canary import clients as canary_clients
from tritonwatch.runtime.model_discovery import client_for, read_model
from tritonwatch.sim.server import Simulator
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import ApiEndpoint

pytestmark = pytest.mark.sim

AWKWARD = "team/a b?c#d%e"
"""A name with every character that used to be quoted differently or could bend a URL."""
TENSOR = Tensor("x", "INT32", (1,), b"\x01\x00\x00\x00")


@pytest.mark.parametrize(
    ("model", "version", "path"),
    [
        ("simple", "", "/v2/models/simple"),
        ("simple", "3", "/v2/models/simple/versions/3"),
        ("a/b", "", "/v2/models/a%2Fb"),
        ("a b", "", "/v2/models/a%20b"),
        ("a?b", "", "/v2/models/a%3Fb"),
        ("a#b", "", "/v2/models/a%23b"),
        ("100%", "", "/v2/models/100%25"),
        (AWKWARD, "2", "/v2/models/team%2Fa%20b%3Fc%23d%25e/versions/2"),
        ("m", "1/2", "/v2/models/m/versions/1%2F2"),
    ],
)
def test_model_path_quotes_each_name_whole(model: str, version: str, path: str) -> None:
    """Breaks if a '/', space, '?', '#' or '%' in a model or version name is left for the
    server to read as a separator, a query, a fragment or an escape."""
    assert model_path(model, version) == path


class _PathRecorder(BaseHTTPRequestHandler):
    """Answers every request ``{}`` and records the request target exactly as sent."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the canary's pool expects
    paths: list[str]

    def _answer(self) -> None:
        self.paths.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the recorded paths, not the log."""


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server on a free port, and the request targets it received."""
    paths: list[str] = []
    handler = type("Recorder", (_PathRecorder,), {"paths": paths})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", paths
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


async def _canary_asks(url: str, model: str, version: str) -> None:
    client = canary_clients.client_for("http", url, "")
    try:
        async with asyncio.timeout(30):
            await client.metadata(model, version)
            await client.config(model, version)
    finally:
        await client.close()


def test_canary_sweep_scraper_and_discovery_ask_under_one_url(
    recorder: tuple[str, list[str]],
) -> None:
    """Breaks if the canary, the sweep, the scraper or discovery quote a model's name
    their own way (the canary once kept '/' where the scraper sent '%2F')."""
    url, paths = recorder
    root = model_path(AWKWARD, "2")
    asyncio.run(_canary_asks(url, AWKWARD, "2"))
    with requests.Session() as session:
        apis = ModelApiClient(ApiEndpoint(url), session=session)  # the scraper's
        deadline = time.monotonic() + 30
        assert apis.model_config(AWKWARD, "2", deadline=deadline).ok
        assert apis.statistics(AWKWARD, "2", deadline=deadline).ok
    reader = client_for(TargetConfig(name="t", url=url), timeout=10.0)  # discovery's
    try:
        read_model(reader, AWKWARD)
    finally:
        reader.close()
    assert paths == [
        root,
        f"{root}/config",
        f"{root}/config",
        f"{root}/stats",
        model_path(AWKWARD),
        f"{model_path(AWKWARD)}/config",
    ]
    canary_infer = canary_clients.client_for("http", url, "").infer_request(
        AWKWARD, "2", [TENSOR], binary=True
    )
    sweep_infer = encode_http_infer(url, AWKWARD, "2", [TENSOR]).payload
    for request in (canary_infer, sweep_infer):
        assert request.startswith(f"POST {root}/infer HTTP/1.1\r\n".encode())


async def _metadata_error(url: str, model: str) -> ServerError:
    client = canary_clients.client_for("http", url, "")
    try:
        async with asyncio.timeout(30):
            await client.metadata(model, "")
    except ServerError as error:
        return error
    finally:
        await client.close()
    raise AssertionError(f"the simulator knew a model named {model!r}")


def test_the_simulator_reads_back_the_name_the_builder_quoted() -> None:
    """Breaks if the simulator's HTTP frontend unquotes a model path otherwise than the
    builder quotes it (its error would name another model than the one asked for)."""
    with Simulator(seed=0).start() as simulator:
        error = asyncio.run(_metadata_error(simulator.http_url, AWKWARD))
    assert error.status() == "404"
    assert error.message() == f"Request for unknown model: '{AWKWARD}' is not found"
