"""Triton's HTTP/REST frontend (KServe v2 plus Triton's extensions) on aiohttp.

Routes follow ``docs/protocol/*.md`` of the Triton server: health, server and model
metadata, model configuration, inference with JSON tensors and the binary tensor
extension (``Inference-Header-Content-Length`` splits the JSON header from the raw
tensors that follow it), statistics, and the model repository extension. Errors are
``{"error": "..."}`` with the status codes and content types real Triton (2.51) answers
with; ``tests/sim/test_differential_real_triton.py`` holds them to it.
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
from tritonwatch.sim.compression import chosen_encoding, compress
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.http_generate import GenerateApi
from tritonwatch.sim.http_infer import HEADER_LENGTH, encode_response, parse_request, split_body
from tritonwatch.sim.http_openai import OpenAIApi
from tritonwatch.sim.llm_stream import DECOUPLED_HTTP_INFER
from tritonwatch.sim.metrics import MALFORMED_TAIL

_log = structlog.get_logger(component="sim")
SERVER_NAME = "triton"
SERVER_VERSION = "2.51.0"
"""The release the simulator is held to (tests/sim/test_differential_real_triton.py)."""
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
"""Triton's list, in its order. Triton prints the extensions its build has, not what a
server can do at the moment (a CPU-only server lists ``cuda_shared_memory``); the
simulator answers the same list, and docs/simulator.md says which it only refuses."""
MAX_BODY_BYTES = 256 * 2**20
JSON = "application/json"
TEXT = "text/plain"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(document), status=status, headers={"Content-Type": JSON})


def _empty(content_type: str = TEXT) -> web.Response:
    """Triton's empty 200: text/plain for health and readiness, JSON for load/unload."""
    return web.Response(status=200, headers={"Content-Type": content_type})


def error_response(error: SimError, content_type: str = JSON) -> web.Response:
    """Triton's error body with the status its HTTP frontend uses for the code."""
    return web.Response(
        body=_dumps({"error": error.message}),
        status=error.code.http_status,
        headers={"Content-Type": content_type},
    )


class _LookupError(Exception):
    """A model lookup failed before the request was read: Triton answers text/plain."""

    def __init__(self, error: SimError) -> None:
        super().__init__(error.message)
        self.error = error


def _version(request: web.Request) -> str:
    return request.match_info.get("version", "")


async def _read_json(request: web.Request) -> dict[str, Any]:
    """A request body as Triton reads it: empty is ``{}``, a non-object has no members,
    and JSON that does not parse is INTERNAL (500)."""
    body = await request.read()
    if not body.strip():
        return {}
    try:
        document = json.loads(body)
    except ValueError as error:
        raise SimError(
            ErrorCode.INTERNAL, f"failed to parse the request JSON buffer: {error}"
        ) from None
    return document if isinstance(document, dict) else {}


def _internal(message: str) -> SimError:
    return SimError(ErrorCode.INTERNAL, message)


class TritonHttpApi:
    """Request handlers bound to one ``SimCore``."""

    def __init__(self, core: SimCore) -> None:
        self._core = core
        self._repository = core.repository
        self._generate = GenerateApi(core.repository)
        self._openai = OpenAIApi(core.repository)

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
                    *self._generate.routes(base),
                )
            ),
            *self._openai.routes(),
        ]

    async def live(self, _: web.Request) -> web.Response:
        return _empty()

    async def ready(self, _: web.Request) -> web.Response:
        return _empty()

    async def server_metadata(self, _: web.Request) -> web.Response:
        return _json(
            {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}
        )

    async def model_metadata(self, request: web.Request) -> web.Response:
        return _json(self._repository.metadata(request.match_info["model"], _version(request)))

    async def model_ready(self, request: web.Request) -> web.Response:
        """200 when ready; otherwise Triton's 400 "Model version not ready", whatever the
        reason (unknown model, unknown version, unloaded)."""
        try:
            self._repository.runtime(request.match_info["model"], _version(request))
        except SimError:
            raise _LookupError(SimError(ErrorCode.INVALID_ARG, "Model version not ready")) from None
        return _empty()

    async def model_config(self, request: web.Request) -> web.Response:
        config = self._repository.config(request.match_info["model"], _version(request))
        return _json(model_config.config_to_json(config))

    async def statistics(self, request: web.Request) -> web.Response:
        name = request.match_info.get("model", "")
        return _json(self._repository.statistics(name, _version(request)))

    async def repository_index(self, request: web.Request) -> web.Response:
        document = await _read_json(request)
        ready = document.get("ready", False)
        if not isinstance(ready, bool):
            raise _internal("attempt to access JSON non-boolean as boolean")
        return _json(self._repository.index(ready_only=ready))

    async def load(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        document = await _read_json(request)
        parameters = document.get("parameters", {})
        if not isinstance(parameters, dict):
            raise _internal("attempt to get members for non-object")
        for key, value in parameters.items():
            if not isinstance(value, str):
                raise _internal("attempt to access JSON non-string as string")
            if key != "config" and not key.startswith("file:"):
                raise _internal("unexpected error on creating Triton parameter")
        if any(key.startswith("file:") for key in parameters):
            raise model_config.load_failed(name, "the simulator does not accept model files")
        self._repository.load(name, parameters.get("config"))
        return _empty(JSON)

    async def unload(self, request: web.Request) -> web.Response:
        await _read_json(request)
        self._repository.unload(request.match_info["model"])
        return _empty(JSON)

    async def infer(self, request: web.Request) -> web.Response:
        name, version = request.match_info["model"], _version(request)
        try:
            spec = self._repository.runtime(name, version).spec
        except SimError as error:
            raise _LookupError(error) from None
        if spec.decoupled:
            raise _LookupError(SimError(ErrorCode.UNSUPPORTED, DECOUPLED_HTTP_INFER))
        header, binary = split_body(await request.read(), request.headers.get(HEADER_LENGTH))
        parsed = parse_request(header, binary, spec.name)
        outcome = await self._repository.infer(
            name,
            version,
            parsed.inputs,
            outputs=[output for output, _ in parsed.outputs],
            request_id=parsed.request_id,
            sequence=parsed.sequence,
        )
        body, json_length = encode_response(parsed, outcome)
        headers = {"Content-Type": JSON if json_length is None else "application/octet-stream"}
        if json_length is not None:
            headers[HEADER_LENGTH] = str(json_length)
        encoding = chosen_encoding(request.headers.get("Accept-Encoding"))
        if encoding != "identity":
            body = compress(body, encoding)
            headers["Content-Encoding"] = encoding
        if outcome.network_delay_s > 0:
            await asyncio.sleep(outcome.network_delay_s)
        return web.Response(body=body, headers=headers)


def _route_error(error: web.HTTPException, path: str) -> web.Response:
    """Triton's answers for a path it has no route for, or a method a route lacks."""
    if isinstance(error, web.HTTPMethodNotAllowed):
        content_type = TEXT if path.endswith("/infer") else JSON
        return web.Response(
            body=_dumps({"error": "Method Not Allowed"}),
            status=405,
            headers={"Content-Type": content_type},
        )
    return web.Response(
        body=_dumps({"error": "Not Found"}), status=404, headers={"Content-Type": TEXT}
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
        except _LookupError as lookup:
            return error_response(lookup.error, TEXT)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as error:
            if request.path.startswith("/sim/"):
                raise
            return _route_error(error, request.path)
        except web.HTTPException:
            raise
        except Exception as error:  # a simulator bug: answer as Triton would, and log it
            _log.exception("request failed", path=request.path)
            return _json({"error": f"internal error: {error}"}, status=500)

    app = web.Application(middlewares=[triton_errors], client_max_size=MAX_BODY_BYTES)
    app.add_routes(TritonHttpApi(core).routes())
    add_admin_routes(app, core)
    return app


METRICS_CONTENT_TYPE = "text/plain; charset=utf-8"
"""What Triton's metrics endpoint sends (no ``version=0.0.4``)."""


def build_metrics_app(core: SimCore) -> web.Application:
    """The application served on the metrics port, answering as Triton's does: the
    exposition on ``GET /metrics`` (and ``/metrics/``), an empty 200 on any other path,
    405 for any other method."""

    async def metrics(request: web.Request) -> web.Response:
        if request.method != "GET":
            return web.Response(
                body=_dumps({"error": "Method Not Allowed"}),
                status=405,
                reason="Not Allowed",
                headers={"Content-Type": TEXT},
            )
        if request.path not in ("/metrics", "/metrics/"):
            return web.Response(status=200, headers={"Content-Type": METRICS_CONTENT_TYPE})
        now = core.loop.time()
        delay = core.faults.metrics_delay(now)
        if delay > 0:
            await asyncio.sleep(delay)
        text = core.render_metrics()
        if core.faults.metrics_malformed(core.loop.time()):
            text += MALFORMED_TAIL
        return web.Response(body=text.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    app = web.Application()
    app.add_routes([web.route("*", "/{tail:.*}", metrics)])
    return app
