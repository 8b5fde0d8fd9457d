"""OpenAI-compatible ``POST /v1/completions`` and ``/v1/chat/completions`` on LLM models.

Served on the simulator's HTTP port (Triton's OpenAI frontend and vLLM serve them on a
port of their own). ``"model"`` names the simulated model. With ``"stream": true`` each
chunk is ``data: <json>`` and a blank line, the stream ends with ``data: [DONE]``, and:
the first chat chunk carries only the role with empty content (it is not a token); each
token is one chunk (``choices[0].delta.content`` for chat, ``choices[0].text`` for
completions), the last with ``finish_reason: "length"``; with
``stream_options.include_usage`` a chunk with ``"choices": []`` and ``usage`` comes
before ``[DONE]``; an error after the start is ``data: {"error": {…}}`` then ``[DONE]``
(vLLM's ``create_streaming_error_response``). Errors before the start are JSON
``{"error": {"message", "type", "param", "code"}}`` with the HTTP status.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from typing import Any

from aiohttp import web

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.http_generate import start_events
from tritonwatch.sim.llm_stream import LlmStream, start_stream
from tritonwatch.sim.repository import ModelRepository

DONE = b"data: [DONE]\n\n"


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _chunk(document: Any) -> bytes:
    return b"data: " + _dumps(document) + b"\n\n"


def _error_body(message: str, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "internal_server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _bad_request(message: str) -> SimError:
    return SimError(ErrorCode.INVALID_ARG, message)


def _prompt(document: dict[str, Any], chat: bool) -> str:
    """The text a completion continues: the prompt, or every message's content."""
    if not chat:
        prompt = document.get("prompt")
        if isinstance(prompt, list) and all(isinstance(part, str) for part in prompt):
            return " ".join(prompt)
        if not isinstance(prompt, str):
            raise _bad_request("'prompt' must be a string or a list of strings")
        return prompt
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad_request("'messages' must be a non-empty list")
    texts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(content, str):
            raise _bad_request("each message needs a string 'content'")
        texts.append(content)
    return " ".join(texts)


class OpenAIApi:
    """The two OpenAI routes over the repository's LLM models."""

    def __init__(self, repository: ModelRepository) -> None:
        self._repository = repository
        self._ids = itertools.count(1)

    def routes(self) -> list[web.RouteDef]:
        """``/v1/completions`` and ``/v1/chat/completions``."""
        return [
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat_completions),
        ]

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            document = json.loads(await request.read())
            if not isinstance(document, dict):
                raise ValueError("not an object")
        except ValueError:
            return self._refuse(_bad_request("the body must be a JSON object"))
        try:
            stream = self._start(document, chat)
        except SimError as error:
            return self._refuse(error)
        completion = _Completion(
            f"{'chatcmpl' if chat else 'cmpl'}-{next(self._ids)}", stream, chat
        )
        if document.get("stream") is True:
            options = document.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            return await completion.stream(request, include_usage=usage)
        return await completion.whole()

    def _start(self, document: dict[str, Any], chat: bool) -> LlmStream:
        model = document.get("model")
        if not isinstance(model, str):
            raise _bad_request("'model' must name a model")
        max_tokens = document.get("max_completion_tokens", document.get("max_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise _bad_request(f"'max_tokens' must be a positive integer, got: {max_tokens!r}")
        prompt = _prompt(document, chat)
        return start_stream(self._repository, model, "", prompt=prompt, max_tokens=max_tokens)

    @staticmethod
    def _refuse(error: SimError) -> web.Response:
        status = error.code.http_status
        return web.Response(
            body=_dumps(_error_body(error.message, status)),
            status=status,
            headers={"Content-Type": "application/json"},
        )


class _Completion:
    """One OpenAI completion being answered."""

    def __init__(self, completion_id: str, stream: LlmStream, chat: bool) -> None:
        self._id = completion_id
        self._stream = stream
        self._chat = chat
        self._created = int(time.time())
        self._object = "chat.completion" if chat else "text_completion"

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self._chat and chunk else self._object
        return {
            "id": self._id,
            "object": kind,
            "created": self._created,
            "model": self._stream.spec.name,
        }

    def _choice(self, text: str, finish: str | None, *, role: bool = False) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if self._chat:
            choice["delta"] = {"role": "assistant", "content": text} if role else {"content": text}
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=finish)
        return choice

    def _usage(self, completion_tokens: int) -> dict[str, int]:
        prompt = self._stream.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    async def stream(self, request: web.Request, *, include_usage: bool) -> web.StreamResponse:
        answer = await start_events(request, 200)
        if self._chat:
            await answer.write(
                _chunk({**self._head(True), "choices": [self._choice("", None, role=True)]})
            )
        tokens = 0
        async with contextlib.aclosing(self._stream.responses()) as responses:
            async for response in responses:
                if response.error is not None:
                    status = response.error.code.http_status
                    await answer.write(_chunk(_error_body(response.error.message, status)))
                    include_usage = False
                    break
                if response.token is None:
                    continue
                tokens += 1
                finish = "length" if response.token.last else None
                choice = self._choice(response.token.text, finish)
                try:
                    await answer.write(_chunk({**self._head(True), "choices": [choice]}))
                except ConnectionError:
                    return answer  # the client left; closing the responses cancels it
        if include_usage:
            await answer.write(
                _chunk({**self._head(True), "choices": [], "usage": self._usage(tokens)})
            )
        await answer.write(DONE)
        await answer.write_eof()
        return answer

    async def whole(self) -> web.Response:
        texts: list[str] = []
        async with contextlib.aclosing(self._stream.responses()) as responses:
            async for response in responses:
                if response.error is not None:
                    return OpenAIApi._refuse(response.error)
                if response.token is not None:
                    texts.append(response.token.text)
        text = "".join(texts)
        choice: dict[str, Any] = {"index": 0}
        if self._chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason="length")
        body = {**self._head(False), "choices": [choice], "usage": self._usage(len(texts))}
        return web.Response(body=_dumps(body), headers={"Content-Type": "application/json"})
