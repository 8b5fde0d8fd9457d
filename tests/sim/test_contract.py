"""Contract: the real ``tritonclient`` (HTTP and gRPC, sync and aio) against the simulator.

One sequence of calls runs through four clients; an adapter hides only how each client
spells results (dicts over HTTP, protobuf messages over gRPC). Every call is asserted on
values: sums from the ``simple`` model, counts in the statistics, configs after loads.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from google.protobuf import json_format  # type: ignore[import-untyped]
from tritonclient.utils import InferenceServerException

from tritonwatch.sim.server import Simulator
from tritonwatch.sim.testing import simple_inputs

pytestmark = pytest.mark.sim


class Adapter:
    """Uniform view of one tritonclient flavour; subclasses read HTTP or gRPC results."""

    module: Any
    not_found: str

    def __init__(self, client: Any) -> None:
        self.client = client

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def close(self) -> None:
        result = self.client.close()
        if inspect.isawaitable(result):
            await result

    async def infer(self, model: str, inputs: list[Any], outputs: list[Any] | None = None) -> Any:
        return await self.call("infer", model, inputs, outputs=outputs)

    async def extensions(self) -> list[str]:
        raise NotImplementedError

    async def tensors(self, model: str) -> list[tuple[str, str, list[int]]]:
        raise NotImplementedError

    async def config(self, model: str) -> dict[str, Any]:
        raise NotImplementedError

    async def stats(self, model: str) -> dict[str, Any]:
        raise NotImplementedError

    async def index(self) -> dict[str, str]:
        raise NotImplementedError


class HttpAdapter(Adapter):
    module = httpclient
    not_found = "404"

    async def extensions(self) -> list[str]:
        return list((await self.call("get_server_metadata"))["extensions"])

    async def tensors(self, model: str) -> list[tuple[str, str, list[int]]]:
        meta = await self.call("get_model_metadata", model)
        return [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"] + meta["outputs"]]

    async def config(self, model: str) -> dict[str, Any]:
        document: dict[str, Any] = await self.call("get_model_config", model)
        return document

    async def stats(self, model: str) -> dict[str, Any]:
        document: dict[str, Any] = (await self.call("get_inference_statistics", model))[
            "model_stats"
        ][0]
        return document

    async def index(self) -> dict[str, str]:
        return {m["name"]: m["state"] for m in await self.call("get_model_repository_index")}


class GrpcAdapter(Adapter):
    module = grpcclient
    not_found = "StatusCode.NOT_FOUND"

    async def extensions(self) -> list[str]:
        return list((await self.call("get_server_metadata")).extensions)

    async def tensors(self, model: str) -> list[tuple[str, str, list[int]]]:
        meta = await self.call("get_model_metadata", model)
        return [(t.name, t.datatype, list(t.shape)) for t in [*meta.inputs, *meta.outputs]]

    async def config(self, model: str) -> dict[str, Any]:
        message = (await self.call("get_model_config", model)).config
        document: dict[str, Any] = json.loads(
            json_format.MessageToJson(message, preserving_proto_field_name=True)
        )
        return document

    async def stats(self, model: str) -> dict[str, Any]:
        message = (await self.call("get_inference_statistics", model)).model_stats[0]
        document: dict[str, Any] = json_format.MessageToDict(
            message,
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )
        return document

    async def index(self) -> dict[str, str]:
        return {m.name: m.state for m in (await self.call("get_model_repository_index")).models}


def count(value: Any) -> int:
    """gRPC JSON prints 64-bit counts as strings; HTTP as numbers."""
    return int(value)


async def run_contract(adapter: Adapter) -> None:
    module = adapter.module
    # Health and server metadata.
    assert await adapter.call("is_server_live") is True
    assert await adapter.call("is_server_ready") is True
    assert {"statistics", "model_repository", "binary_tensor_data"} <= set(
        await adapter.extensions()
    )
    assert await adapter.call("is_model_ready", "simple") is True
    # Model metadata and configuration.
    assert await adapter.tensors("simple") == [
        (name, "INT32", [-1, 16]) for name in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
    ]
    config = await adapter.config("simple")
    assert config["max_batch_size"] == 8
    assert count(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 100
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["instance_group"][0]["kind"] == "KIND_GPU"
    assert config["instance_group"][0]["count"] == 1
    # Inference: one row, binary tensors.
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.full((1, 16), 7, dtype=np.int32)
    result = await adapter.infer("simple", simple_inputs(module, first, second))
    assert np.array_equal(result.as_numpy("OUTPUT0"), first + 7)
    assert np.array_equal(result.as_numpy("OUTPUT1"), first - 7)
    # Three rows in one request; over HTTP as JSON tensors both ways.
    rows = np.arange(48, dtype=np.int32).reshape(3, 16)
    if module is httpclient:
        outputs = [
            httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT0", "OUTPUT1")
        ]
        result = await adapter.infer(
            "simple", simple_inputs(module, rows, rows, binary=False), outputs
        )
        assert result.get_output("OUTPUT0")["data"] == (rows * 2).reshape(-1).tolist()
    else:
        result = await adapter.infer("simple", simple_inputs(module, rows, rows))
    assert np.array_equal(result.as_numpy("OUTPUT0"), rows * 2)
    assert np.array_equal(result.as_numpy("OUTPUT1"), np.zeros((3, 16), dtype=np.int32))
    # A BYTES model echoes strings.
    text = module.InferInput("INPUT0", [2, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"hello"], ["w\u00f6rld".encode()]], dtype=np.object_))
    echoed = (await adapter.infer("text_identity", [text])).as_numpy("OUTPUT0")
    assert echoed.reshape(-1).tolist() == [b"hello", "w\u00f6rld".encode()]
    # Statistics count exactly what was sent.
    stats = await adapter.stats("simple")
    assert count(stats["inference_stats"]["success"]["count"]) == 2
    assert count(stats["inference_count"]) == 4
    executions = count(stats["execution_count"])
    assert 1 <= executions <= 2
    assert sum(count(b["compute_infer"]["count"]) for b in stats["batch_stats"]) == executions
    assert (
        sum(
            count(b["batch_size"]) * count(b["compute_infer"]["count"])
            for b in stats["batch_stats"]
        )
        == 4
    )
    assert count(stats["inference_stats"]["queue"]["ns"]) > 0
    # Load with a config override: instance count only, applied in place (stats kept).
    config["instance_group"][0]["count"] = 3
    await adapter.call("load_model", "simple", config=json.dumps(config))
    assert (await adapter.config("simple"))["instance_group"][0]["count"] == 3
    assert count((await adapter.stats("simple"))["inference_stats"]["success"]["count"]) == 2
    # Another field changes: the model is reloaded (new statistics) and keeps serving.
    config["dynamic_batching"]["max_queue_delay_microseconds"] = 300
    await adapter.call("load_model", "simple", config=json.dumps(config))
    assert (
        count((await adapter.config("simple"))["dynamic_batching"]["max_queue_delay_microseconds"])
        == 300
    )
    assert count((await adapter.stats("simple"))["inference_stats"]["success"]["count"]) == 0
    result = await adapter.infer("simple", simple_inputs(module, first, second))
    assert np.array_equal(result.as_numpy("OUTPUT0"), first + 7)
    # Unload: not ready, UNAVAILABLE in the index, inference refused; load brings it back.
    await adapter.call("unload_model", "resnet50")
    assert await adapter.call("is_model_ready", "resnet50") is False
    assert (await adapter.index())["resnet50"] == "UNAVAILABLE"
    image = module.InferInput("input", [1, 3, 32, 32], "FP32")
    image.set_data_from_numpy(np.zeros((1, 3, 32, 32), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="'resnet50' has no available versions"):
        await adapter.infer("resnet50", [image])
    await adapter.call("load_model", "resnet50")
    assert (await adapter.index())["resnet50"] == "READY"
    logits = (await adapter.infer("resnet50", [image])).as_numpy("output")
    assert logits.shape == (1, 10)
    # Errors as Triton sends them.
    with pytest.raises(InferenceServerException) as caught:
        await adapter.call("get_model_metadata", "nope")
    assert caught.value.status() == adapter.not_found
    assert "Request for unknown model: 'nope' is not found" in caught.value.message()


CLIENTS: dict[str, Callable[[Simulator], Adapter]] = {
    "http-sync": lambda sim: HttpAdapter(
        httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    ),
    "http-aio": lambda sim: HttpAdapter(
        httpaio.InferenceServerClient(sim.http_url.removeprefix("http://"))
    ),
    "grpc-sync": lambda sim: GrpcAdapter(grpcclient.InferenceServerClient(sim.grpc_url)),
    "grpc-aio": lambda sim: GrpcAdapter(grpcaio.InferenceServerClient(sim.grpc_url)),
}


@pytest.mark.parametrize("flavour", list(CLIENTS))
def test_tritonclient_contract(sim: Simulator, flavour: str) -> None:
    """Health, metadata, config, infer, stats, load/override, unload and errors all work."""

    async def main() -> None:
        adapter = CLIENTS[flavour](sim)
        try:
            await run_contract(adapter)
        finally:
            await adapter.close()

    asyncio.run(main())
