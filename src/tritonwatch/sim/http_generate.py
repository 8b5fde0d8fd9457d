"""Triton's generate extension: ``POST …/generate`` and ``…/generate_stream``.

As real Triton 2.51 answers (``http_server.cc``, checked with the streaming test model):
each top-level key of the JSON body, and each key of its ``"parameters"`` object, that
names an input becomes that input (a scalar or a one-element array); others are request
parameters; ``"id"`` is the request id. Every response is one JSON object with its keys
sorted (the output tensors, ``id``, ``model_name``, ``model_version``), a one-element
tensor unwrapped to a scalar. ``generate_stream`` sends each response as ``data: <json>``
and a blank line, one HTTP/1.1 chunk each, with ``text/event-stream; charset=utf-8``;
a flag-only final response writes nothing, and the stream ends with the body. Errors
before the first response are ``{"error": …}`` JSON with Triton's status; a later error
is the event ``data: {"error": …}`` in a stream already answered 200. ``generate``
accepts only a model that sends exactly one response, and says so in a 200 body
otherwise.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aiohttp import web

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.llm_stream import LlmStream, StreamResponse, llm_spec, start_stream
from tritonwatch.sim.models import ModelSpec
from tritonwatch.sim.repository import ModelRepository
from tritonwatch.sim.tensors import request_label

EVENT_STREAM = "text/event-stream; charset=utf-8"
ONE_RESPONSE_ONLY = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def event(document: Any) -> bytes:
    """One server-sent event carrying ``document``."""
    return b"data: " + _dumps(document) + b"\n\n"


def _scalar(name: str, value: object, label: str, kind: type | tuple[type, ...]) -> Any:
    """A generate field as one value: a scalar, or a one-element array unwrapped."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SimError(
            ErrorCode.INVALID_ARG,
            f"{label}input '{name}' must hold one {getattr(kind, '__name__', kind)}, "
            f"got: {value!r}",
        )
    return value


class GenerateRequest:
    """A generate body mapped onto an LLM model's inputs (see the module docstring)."""

    def __init__(self, body: bytes, spec: ModelSpec) -> None:
        try:
            document = json.loads(body) if body.strip() else {}
        except ValueError as error:
            raise SimError(
                ErrorCode.INTERNAL, f"failed to parse the request JSON buffer: {error}"
            ) from None
        if not isinstance(document, dict):
            raise SimError(ErrorCode.INTERNAL, "attempt to get members for non-object")
        request_id = document.get("id")
        self.request_id = request_id if isinstance(request_id, str) else None
        nested = document.get("parameters")
        fields = {**(nested if isinstance(nested, dict) else {}), **document}
        llm = spec.llm
        assert llm is not None  # only LLM models reach the generate routes
        names = [tensor.name for tensor in spec.input]
        given = {key: fields[key] for key in names if key in fields}
        label = request_label(self.request_id or "")
        if llm.text_input not in given:
            expected = (
                "1 inputs" if len(names) == 1 else f"number of inputs between 1 and {len(names)}"
            )
            raise SimError(
                ErrorCode.INVALID_ARG,
                f"{label}expected {expected} but got {len(given)} inputs for model "
                f"'{spec.name}'. Got input(s) {sorted(given)}, but missing required input(s) "
                f"['{llm.text_input}']. Please provide all required input(s).",
            )
        self.prompt: str = _scalar(llm.text_input, given[llm.text_input], label, str)
        self.max_tokens: int | None = None
        if llm.max_tokens_input in given:
            self.max_tokens = _scalar(llm.max_tokens_input, given[llm.max_tokens_input], label, int)
            if self.max_tokens < 1:
                raise SimError(
                    ErrorCode.INVALID_ARG,
                    f"{label}{llm.max_tokens_input} must be at least 1, got: {self.max_tokens}",
                )
        self.text_output = llm.text_output

    def reply(self, stream: LlmStream, response: StreamResponse) -> dict[str, Any]:
        """The JSON object of one data response."""
        assert response.token is not None
        reply: dict[str, Any] = {
            "model_name": stream.spec.name,
            "model_version": stream.spec.version_label,
            self.text_output: response.token.text,
        }
        if self.request_id is not None:
            reply["id"] = self.request_id
        return reply


class GenerateApi:
    """The two generate routes over the repository's LLM models."""

    def __init__(self, repository: ModelRepository) -> None:
        self._repository = repository

    def routes(self, base: str) -> list[web.RouteDef]:
        """The routes under one model path (with or without a version)."""
        return [
            web.post(base + "/generate", self.generate),
            web.post(base + "/generate_stream", self.generate_stream),
        ]

    async def _start(self, request: web.Request) -> tuple[GenerateRequest, LlmStream]:
        name = request.match_info["model"]
        version = request.match_info.get("version", "")
        spec = llm_spec(self._repository, name, version)
        parsed = GenerateRequest(await request.read(), spec)
        stream = start_stream(
            self._repository, name, version, prompt=parsed.prompt, max_tokens=parsed.max_tokens
        )
        return parsed, stream

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """One request, one JSON answer; a model that streams more is an error (200)."""
        parsed, stream = await self._start(request)
        replies: list[StreamResponse] = []
        async with contextlib.aclosing(stream.responses()) as responses:
            async for response in responses:
                if response.error is not None:
                    if not replies:
                        raise response.error
                    break
                if response.token is not None:
                    replies.append(response)
                if len(replies) > 1:
                    break
        if len(replies) == 1:
            return web.Response(
                body=_dumps(parsed.reply(stream, replies[0])),
                headers={"Content-Type": "application/json"},
            )
        answer = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        answer.enable_chunked_encoding()
        await answer.prepare(request)
        await answer.write(_dumps({"error": ONE_RESPONSE_ONLY}))
        await answer.write_eof()
        return answer

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events, one per data response, chunked."""
        parsed, stream = await self._start(request)
        answer: web.StreamResponse | None = None
        async with contextlib.aclosing(stream.responses()) as responses:
            async for response in responses:
                if answer is None and response.token is None and response.error is None:
                    break  # nothing but a final flag: no event at all
                if answer is None:
                    status = 200 if response.error is None else response.error.code.http_status
                    answer = await start_events(request, status)
                if response.error is not None:
                    await answer.write(event({"error": response.error.message}))
                    break
                if response.token is not None:
                    try:
                        await answer.write(event(parsed.reply(stream, response)))
                    except ConnectionError:
                        # The client left: closing the responses cancels the request,
                        # and there is no one to write the terminal chunk to.
                        return answer
        if answer is None:
            answer = await start_events(request, 200)
        await answer.write_eof()
        return answer


async def start_events(request: web.Request, status: int) -> web.StreamResponse:
    """Sends the head of a chunked ``text/event-stream`` answer."""
    answer = web.StreamResponse(status=status, headers={"Content-Type": EVENT_STREAM})
    answer.enable_chunked_encoding()
    await answer.prepare(request)
    return answer
