"""Triton's gRPC frontend: ``inference.GRPCInferenceService`` on ``grpc.aio``.

Implemented on the generated modules that ship inside ``tritonclient.grpc``
(``service_pb2``, ``service_pb2_grpc``, ``model_config_pb2``), so there is no code
generation step. Tensors travel as ``raw_input_contents``/``raw_output_contents`` (what
``tritonclient`` sends); typed ``contents`` are accepted too. Errors abort the call
with the gRPC status Triton uses for the error code.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tritonwatch.common.kserve import GRPC_TYPED_CONTENTS
from tritonwatch.sim import model_config
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.http_api import EXTENSIONS, SERVER_NAME, SERVER_VERSION
from tritonwatch.sim.llm_stream import DECOUPLED_GRPC_INFER, StreamResponse, start_stream
from tritonwatch.sim.models import LlmSpec, ModelSpec
from tritonwatch.sim.repository import InferOutcome
from tritonwatch.sim.sequence_params import grpc_sequence_flags, set_grpc_parameters
from tritonwatch.sim.tensors import (
    BY_WIRE,
    RequestInput,
    deserialize_bytes,
    encode_binary,
    serialize_bytes,
    wire_type,
)

FINAL = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"

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
        if spec.decoupled:
            raise SimError(ErrorCode.UNSUPPORTED, DECOUPLED_GRPC_INFER)
        reply = await self._infer(request)
        return reply

    async def _infer(self, request: Any) -> Any:
        """One non-decoupled inference, answered as ``ModelInferResponse``."""
        spec = self._repository.runtime(request.model_name, request.model_version).spec
        inputs = _request_inputs(request, spec.name)
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
            sequence=grpc_sequence_flags(request.parameters),
        )
        reply = _infer_reply(request, outcome, names)
        if outcome.network_delay_s > 0:
            await asyncio.sleep(outcome.network_delay_s)
        return reply

    async def ModelStreamInfer(  # noqa: N802
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Triton's bidirectional stream: many requests, each answered by its responses
        (told apart by ``id``), errors in-band in ``error_message``, the stream open."""
        await self.core.faults.wait_while_hung(self.core.loop, "server")
        outbox: asyncio.Queue[Any] = asyncio.Queue()
        requests: set[asyncio.Task[None]] = set()

        async def read() -> None:
            async for request in request_iterator:
                task = asyncio.get_running_loop().create_task(self._answer(request, outbox))
                requests.add(task)
                task.add_done_callback(requests.discard)
            while requests:
                await asyncio.gather(*requests, return_exceptions=True)
            outbox.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (response := await outbox.get()) is not None:
                yield response
        finally:
            reader.cancel()
            for task in list(requests):
                task.cancel()

    async def _answer(self, request: Any, outbox: asyncio.Queue[Any]) -> None:
        """Every response of one streamed request, or its error, onto ``outbox``."""
        try:
            spec = self._repository.runtime(request.model_name, request.model_version).spec
            if spec.llm is None:
                reply = await self._infer(request)
                reply.parameters[FINAL].bool_param = True
                outbox.put_nowait(pb.ModelStreamInferResponse(infer_response=reply))
                return
            await self._stream_llm(request, outbox)
        except SimError as error:
            outbox.put_nowait(_stream_error(request, error.message))

    async def _stream_llm(self, request: Any, outbox: asyncio.Queue[Any]) -> None:
        spec = self._repository.runtime(request.model_name, request.model_version).spec
        assert spec.llm is not None  # only LLM models stream here
        prompt, max_tokens = _llm_inputs(request, spec.llm)
        stream = start_stream(
            self._repository,
            request.model_name,
            request.model_version,
            prompt=prompt,
            max_tokens=max_tokens,
        )
        empty_final = EMPTY_FINAL in request.parameters and bool(
            request.parameters[EMPTY_FINAL].bool_param
        )
        async with contextlib.aclosing(stream.responses()) as responses:  # cancel frees it
            async for response in responses:
                if response.error is not None:
                    outbox.put_nowait(_stream_error(request, response.error.message))
                    return
                if response.token is None and not empty_final:
                    continue  # a flag-only final reaches the client only when it asked
                outbox.put_nowait(
                    pb.ModelStreamInferResponse(
                        infer_response=_token_reply(request, stream.spec, response)
                    )
                )


def _request_inputs(request: Any, model: str) -> list[RequestInput]:
    """A ``ModelInferRequest``'s inputs, raw or typed contents."""
    raw = request.raw_input_contents
    inputs = []
    for index, tensor in enumerate(request.inputs):
        if "shared_memory_region" in tensor.parameters:  # none can be registered here
            region = tensor.parameters["shared_memory_region"].string_param
            raise SimError(ErrorCode.NOT_FOUND, f"Unable to find shared memory region: '{region}'")
        data = raw[index] if index < len(raw) else _typed_input(tensor, model)
        inputs.append(RequestInput(tensor.name, tensor.datatype, tuple(tensor.shape), raw=data))
    return inputs


def _infer_reply(request: Any, outcome: InferOutcome, names: list[str]) -> Any:
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
    if outcome.parameters is not None:
        set_grpc_parameters(reply, outcome.parameters)
    return reply


def _llm_inputs(request: Any, llm: LlmSpec) -> tuple[str, int | None]:
    """The prompt (BYTES) and the optional token bound (an integer) of a request."""
    by_name = {tensor.name: index for index, tensor in enumerate(request.inputs)}
    if llm.text_input not in by_name:
        raise SimError(
            ErrorCode.INVALID_ARG,
            f"[request id: {request.id or '<id_unknown>'}] missing required input(s) "
            f"['{llm.text_input}'] for model '{request.model_name}'",
        )
    inputs = _request_inputs(request, request.model_name)
    text = inputs[by_name[llm.text_input]].raw or b""
    prompt_value = deserialize_bytes(text, 1, llm.text_input).reshape(-1)[0]
    prompt = prompt_value.decode(errors="replace") if isinstance(prompt_value, bytes) else ""
    max_tokens = None
    if llm.max_tokens_input in by_name:
        tensor = inputs[by_name[llm.max_tokens_input]]
        info = BY_WIRE.get(tensor.datatype)
        if info is None or info.numpy.kind not in "iu" or not tensor.raw:
            raise SimError(ErrorCode.INVALID_ARG, "max_tokens must be one integer")
        max_tokens = int(np.frombuffer(bytes(tensor.raw), dtype=info.numpy)[0])
    return prompt, max_tokens


def _token_reply(request: Any, spec: ModelSpec, response: StreamResponse) -> Any:
    reply = pb.ModelInferResponse(
        model_name=spec.name, model_version=spec.version_label, id=request.id
    )
    if response.token is not None and spec.llm is not None:
        array = np.array([response.token.text.encode()], dtype=np.object_)
        reply.outputs.add(name=spec.llm.text_output, datatype="BYTES", shape=[1])
        reply.raw_output_contents.append(serialize_bytes(array))
    reply.parameters[FINAL].bool_param = response.final
    return reply


def _stream_error(request: Any, message: str) -> Any:
    """An in-band error: the message, and a response cleared but for id and model."""
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )


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
