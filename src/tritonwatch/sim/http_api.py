"""Triton's HTTP/REST frontend (KServe v2 plus Triton's extensions) on aiohttp.

Routes follow ``docs/protocol/*.md`` of the Triton server: health, server and model
metadata, model configuration, inference with JSON tensors and the binary tensor
extension (``Inference-Header-Content-Length`` splits the JSON header from the raw
tensors that follow it), statistics, and the model repository extension. Errors are
``{"error": "..."}`` with Triton's status codes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from tritonwatch.sim import model_config
from tritonwatch.sim.admin import add_admin_routes
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.metrics import MALFORMED_TAIL
from tritonwatch.sim.repository import InferOutcome
from tritonwatch.sim.tensors import (
    Array,
    decode_binary,
    decode_json,
    encode_binary,
    encode_json,
    wire_type,
)

_log = structlog.get_logger(component="sim")
SERVER_NAME = "triton"
SERVER_VERSION = "2.73.0"
EXTENSIONS = (
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
)
HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_BODY_BYTES = 256 * 2**20
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dumps(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(document), status=status, content_type="application/json")


def error_response(error: SimError) -> web.Response:
    """Triton's error body with the status its HTTP frontend uses for the code."""
    return _json({"error": error.message}, status=error.code.http_status)


def _version(request: web.Request) -> str:
    return request.match_info.get("version", "")


async def _read_json(request: web.Request) -> dict[str, Any]:
    body = await request.read()
    if not body.strip():
        return {}
    try:
        document = json.loads(body)
    except ValueError as error:
        raise SimError(
            ErrorCode.INVALID_ARG, f"failed to parse the request JSON buffer: {error}"
        ) from None
    if not isinstance(document, dict):
        raise SimError(ErrorCode.INVALID_ARG, "the request JSON must be an object")
    return document


class TritonHttpApi:
    """Request handlers bound to one ``SimCore``."""

    def __init__(self, core: SimCore) -> None:
        self._core = core
        self._repository = core.repository

    def routes(self) -> list[web.RouteDef]:
        """Every KServe/Triton route; fixed paths come before ``{model}`` patterns."""
        model = "/v2/models/{model}"
        versioned = "/v2/models/{model}/versions/{version}"
        return [
            web.get("/v2/health/live", self.live),
            web.get("/v2/health/ready", self.ready),
            web.get("/v2", self.server_metadata),
            web.get("/v2/models/stats", self.statistics),
            web.post("/v2/repository/index", self.repository_index),
            web.post("/v2/repository/models/{model}/load", self.load),
            web.post("/v2/repository/models/{model}/unload", self.unload),
            *(
                route
                for base in (model, versioned)
                for route in (
                    web.get(base, self.model_metadata),
                    web.get(base + "/ready", self.model_ready),
                    web.get(base + "/config", self.model_config),
                    web.get(base + "/stats", self.statistics),
                    web.post(base + "/infer", self.infer),
                )
            ),
        ]

    async def live(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def ready(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def server_metadata(self, _: web.Request) -> web.Response:
        return _json(
            {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}
        )

    async def model_metadata(self, request: web.Request) -> web.Response:
        return _json(self._repository.metadata(request.match_info["model"], _version(request)))

    async def model_ready(self, request: web.Request) -> web.Response:
        self._repository.runtime(request.match_info["model"], _version(request))
        return web.Response(status=200)

    async def model_config(self, request: web.Request) -> web.Response:
        config = self._repository.config(request.match_info["model"], _version(request))
        return _json(model_config.config_to_json(config))

    async def statistics(self, request: web.Request) -> web.Response:
        name = request.match_info.get("model", "")
        return _json(self._repository.statistics(name, _version(request)))

    async def repository_index(self, request: web.Request) -> web.Response:
        document = await _read_json(request)
        return _json(self._repository.index(ready_only=bool(document.get("ready", False))))

    async def load(self, request: web.Request) -> web.Response:
        document = await _read_json(request)
        parameters = document.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise _invalid("'parameters' must be an object")
        if any(key.startswith("file:") for key in parameters):
            raise SimError(ErrorCode.UNSUPPORTED, "the simulator does not accept model files")
        config = parameters.get("config")
        if config is not None and not isinstance(config, str):
            raise SimError(ErrorCode.INVALID_ARG, "parameter 'config' must be a JSON string")
        self._repository.load(request.match_info["model"], config)
        return web.Response(status=200)

    async def unload(self, request: web.Request) -> web.Response:
        await _read_json(request)
        self._repository.unload(request.match_info["model"])
        return web.Response(status=200)

    async def infer(self, request: web.Request) -> web.Response:
        body = await request.read()
        header_length = request.headers.get(HEADER_LENGTH)
        if header_length is None:
            header, binary = body, memoryview(b"")
        else:
            if not header_length.isdigit() or int(header_length) > len(body):
                raise SimError(
                    ErrorCode.INVALID_ARG,
                    f"{HEADER_LENGTH} must be a byte count within the body, got: {header_length!r}",
                )
            split = int(header_length)
            header, binary = body[:split], memoryview(body)[split:]
        document = _infer_document(header)
        inputs = _decode_inputs(document["inputs"], binary)
        outcome = await self._repository.infer(
            request.match_info["model"], _version(request), inputs
        )
        response = _encode_outputs(document, outcome)
        if outcome.network_delay_s > 0:
            await asyncio.sleep(outcome.network_delay_s)
        return response


def _invalid(message: str) -> SimError:
    return SimError(ErrorCode.INVALID_ARG, message)


def _infer_document(header: bytes) -> dict[str, Any]:
    """Parses and shape-checks the JSON part of an inference request."""
    try:
        document = json.loads(header)
    except ValueError as error:
        raise _invalid(f"failed to parse the request JSON buffer: {error}") from None
    if not isinstance(document, dict):
        raise _invalid("the inference request must be a JSON object")
    inputs = document.setdefault("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(t, dict) for t in inputs):
        raise _invalid("'inputs' must be a list of tensor objects")
    for tensor in inputs:
        shape = tensor.get("shape")
        if not (
            isinstance(tensor.get("name"), str)
            and isinstance(tensor.get("datatype"), str)
            and isinstance(shape, list)
            and all(isinstance(dim, int) and dim >= 0 for dim in shape)
        ):
            raise _invalid("each input needs a 'name', a 'datatype' and a 'shape' of counts")
        parameters = tensor.setdefault("parameters", {})
        size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
        if not isinstance(parameters, dict) or not (
            size is None or (isinstance(size, int) and size >= 0)
        ):
            raise _invalid(f"invalid 'parameters' of input '{tensor['name']}'")
    outputs = document.get("outputs") or []
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs
    ):
        raise _invalid("'outputs' must be a list of objects with a 'name'")
    if not isinstance(document.get("parameters") or {}, dict):
        raise _invalid("'parameters' must be an object")
    return document


def _decode_inputs(
    tensors: list[dict[str, Any]], binary: memoryview
) -> dict[str, tuple[str, Array]]:
    inputs: dict[str, tuple[str, Array]] = {}
    offset = 0
    for tensor in tensors:
        name, datatype, shape = tensor["name"], tensor["datatype"], tensor["shape"]
        size = tensor["parameters"].get("binary_data_size")
        if size is not None:
            if offset + size > len(binary):
                raise _invalid(f"unexpected end of binary data for input '{name}'")
            array = decode_binary(name, datatype, shape, binary[offset : offset + size])
            offset += size
        else:
            array = decode_json(name, datatype, shape, tensor.get("data"))
        inputs[name] = (datatype, array)
    return inputs


def _encode_outputs(document: dict[str, Any], outcome: InferOutcome) -> web.Response:
    spec = outcome.spec
    binary_default = bool((document.get("parameters") or {}).get("binary_data_output", False))
    requested = document.get("outputs")
    known = {tensor.name: tensor for tensor in spec.output}
    if requested:
        selection = []
        for item in requested:
            if item.get("name") not in known:
                raise SimError(
                    ErrorCode.INVALID_ARG,
                    f"unexpected inference output '{item.get('name')}' for model '{spec.name}'",
                )
            flag = (item.get("parameters") or {}).get("binary_data", binary_default)
            selection.append((item["name"], bool(flag)))
    else:
        selection = [(name, binary_default) for name in known]
    outputs, chunks = [], []
    for name, binary in selection:
        datatype = wire_type(known[name].data_type)
        array = outcome.outputs[name]
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = encode_binary(datatype, array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = encode_json(datatype, array)
        outputs.append(entry)
    reply: dict[str, Any] = {"model_name": spec.name, "model_version": spec.version_label}
    if "id" in document:
        reply["id"] = document["id"]
    reply["outputs"] = outputs
    text = _dumps(reply).encode()
    if not chunks:
        return web.Response(body=text, content_type="application/json")
    return web.Response(
        body=b"".join((text, *chunks)),
        headers={HEADER_LENGTH: str(len(text))},
        content_type="application/octet-stream",
    )


def build_api_app(core: SimCore) -> web.Application:
    """The application served on the HTTP port: Triton's API plus ``/sim`` admin."""

    @web.middleware
    async def triton_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/sim/"):
            await core.faults.wait_while_hung(core.loop, "server")
        try:
            return await handler(request)
        except SimError as error:
            return error_response(error)
        except web.HTTPException:
            raise
        except Exception as error:  # a simulator bug: answer as Triton would, and log it
            _log.exception("request failed", path=request.path)
            return _json({"error": f"internal error: {error}"}, status=500)

    app = web.Application(middlewares=[triton_errors], client_max_size=MAX_BODY_BYTES)
    app.add_routes(TritonHttpApi(core).routes())
    add_admin_routes(app, core)
    return app


def build_metrics_app(core: SimCore) -> web.Application:
    """The application served on the metrics port: ``GET /metrics``."""

    async def metrics(_: web.Request) -> web.Response:
        now = core.loop.time()
        delay = core.faults.metrics_delay(now)
        if delay > 0:
            await asyncio.sleep(delay)
        text = core.render_metrics()
        if core.faults.metrics_malformed(core.loop.time()):
            text += MALFORMED_TAIL
        return web.Response(
            body=text.encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics)])
    return app
