"""Triton's gRPC frontend: ``inference.GRPCInferenceService`` on ``grpc.aio``.

Implemented on the generated modules that ship inside ``tritonclient.grpc``
(``service_pb2``, ``service_pb2_grpc``, ``model_config_pb2``), so there is no code
generation step. Tensors travel as ``raw_input_contents``/``raw_output_contents`` (what
``tritonclient`` sends); typed ``contents`` are accepted too. Errors abort the call
with the gRPC status Triton uses for the error code.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tritonwatch.kserve import GRPC_TYPED_CONTENTS
from tritonwatch.sim import model_config
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.http_api import EXTENSIONS, SERVER_NAME, SERVER_VERSION
from tritonwatch.sim.tensors import (
    BY_WIRE,
    RequestInput,
    encode_binary,
    serialize_bytes,
    wire_type,
)

Reply = TypeVar("Reply")


def _rpc(
    method: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[Reply]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[Reply]]:
    """Applies the server-wide hang fault and maps ``SimError`` to a gRPC status."""

    @functools.wraps(method)
    async def wrapper(
        self: TritonGrpcService, request: Any, context: grpc.aio.ServicerContext
    ) -> Reply:
        await self.core.faults.wait_while_hung(self.core.loop, "server")
        try:
            return await method(self, request, context)
        except SimError as error:
            await context.abort(error.code.grpc_status, error.message)
            raise  # abort raises; this line only satisfies the type checker

    return wrapper


def _typed_input(tensor: Any, model: str) -> bytes:
    """The typed ``contents`` of a tensor as raw bytes (Triton converts them too)."""
    if not tensor.HasField("contents"):
        raise SimError(
            ErrorCode.INVALID_ARG,
            f"unable to find data for input tensor '{tensor.name}' for model '{model}' in request.",
        )
    field = GRPC_TYPED_CONTENTS.get(tensor.datatype)
    if field is None:  # an unknown datatype: the model's data-type check refuses it
        return b""
    values = list(getattr(tensor.contents, field))
    if tensor.datatype == "BYTES":
        array = np.empty(len(values), dtype=np.object_)
        array[:] = values
        return serialize_bytes(array)
    return np.asarray(values, dtype=BY_WIRE[tensor.datatype].numpy).tobytes()


class TritonGrpcService(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """The servicer; every method runs on the simulator's loop."""

    def __init__(self, core: SimCore) -> None:
        self.core = core
        self._repository = core.repository

    @_rpc
    async def ServerLive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return pb.ServerLiveResponse(live=True)

    @_rpc
    async def ServerReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return pb.ServerReadyResponse(ready=True)

    @_rpc
    async def ModelReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        try:
            self._repository.runtime(request.name, request.version)
        except SimError:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    @_rpc
    async def ServerMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return pb.ServerMetadataResponse(
            name=SERVER_NAME, version=SERVER_VERSION, extensions=list(EXTENSIONS)
        )

    @_rpc
    async def ModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return json_format.ParseDict(
            self._repository.metadata(request.name, request.version), pb.ModelMetadataResponse()
        )

    @_rpc
    async def ModelConfig(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return pb.ModelConfigResponse(config=self._repository.config(request.name, request.version))

    @_rpc
    async def ModelStatistics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        stats = self._repository.statistics(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    @_rpc
    async def RepositoryIndex(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        entries = self._repository.index(ready_only=request.ready)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**entry) for entry in entries]
        )

    @_rpc
    async def RepositoryModelLoad(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        parameters = request.parameters
        if any(key.startswith("file:") for key in parameters):
            raise model_config.load_failed(
                request.model_name, "the simulator does not accept model files"
            )
        config = parameters["config"].string_param if "config" in parameters else None
        self._repository.load(request.model_name, config)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        self._repository.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    @_rpc
    async def ModelInfer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        spec = self._repository.runtime(request.model_name, request.model_version).spec
        raw = request.raw_input_contents
        inputs = []
        for index, tensor in enumerate(request.inputs):
            if "shared_memory_region" in tensor.parameters:  # none can be registered here
                region = tensor.parameters["shared_memory_region"].string_param
                raise SimError(
                    ErrorCode.NOT_FOUND, f"Unable to find shared memory region: '{region}'"
                )
            data = raw[index] if index < len(raw) else _typed_input(tensor, spec.name)
            inputs.append(RequestInput(tensor.name, tensor.datatype, tuple(tensor.shape), raw=data))
        if any("classification" in output.parameters for output in request.outputs):
            raise SimError(
                ErrorCode.INVALID_ARG,
                "the simulator does not support the classification extension",
            )
        names = [output.name for output in request.outputs]
        outcome = await self._repository.infer(
            request.model_name,
            request.model_version,
            inputs,
            outputs=names,
            request_id=request.id,
        )
        spec = outcome.spec
        known = {tensor.name: tensor for tensor in spec.output}
        reply = pb.ModelInferResponse(
            model_name=spec.name, model_version=spec.version_label, id=request.id
        )
        for name in names or list(known):
            datatype = wire_type(known[name].data_type)
            array = outcome.outputs[name]
            reply.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
            reply.raw_output_contents.append(encode_binary(datatype, array))
        if outcome.network_delay_s > 0:
            await asyncio.sleep(outcome.network_delay_s)
        return reply


def build_grpc_server(core: SimCore) -> grpc.aio.Server:
    """A ``grpc.aio`` server carrying the servicer, with Triton's unlimited message sizes."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
        ]
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(TritonGrpcService(core), server)
    return server
