"""What a streaming canary sends and how it reads each response, per protocol (pure).

Three codecs, each turning (prompt, max_tokens) into a request body and each response
into a :class:`Piece` (docs/plans/issue18.md A1-A4, pinned on the real server by
tests/triton/test_generate_stream_real.py):

* :class:`GenerateCodec`: Triton's ``generate_stream`` (HTTP). The body is one JSON
  object whose keys Triton matches to the model's inputs by name; a one-element output
  comes back as a JSON scalar, an error as ``{"error": "..."}``, and nothing marks the
  end but the end of the chunked body.
* :class:`OpenAICodec`: ``/v1/chat/completions`` and ``/v1/completions`` with
  ``stream: true`` (vLLM, trtllm-serve, Triton's OpenAI frontend). The first chat chunk
  carries only the role, the usage chunk has ``choices: []``, and ``[DONE]`` ends it.
* :class:`GrpcStreamCodec`: Triton's ``ModelStreamInfer``. Every response carries
  ``triton_final_response``; the request asks for the empty final response, or the
  client would never learn that a request which ended on a flag-only response ended.

Only inputs the model has are sent: the text, then ``max_tokens`` (or, for the vLLM
backend, which has none, ``sampling_parameters`` as a JSON string), ``stream``, and
``return_num_output_tokens`` when there is one, so the server counts the tokens. A model
with no text input is sent the tensors the plain canary builds
(:func:`~tritonwatch.kserve.payload.build_inputs`), and any output counts as content.

A piece's ``tokens`` is the server's count for that piece: the vLLM backend's
``num_output_tokens`` (tokens in this response), or OpenAI's usage chunk, which covers
the whole stream and comes with no content. Either way a stream's count is the sum over
its pieces; None everywhere means the server counted nothing. The canary never
tokenizes. Config types are not imported: :class:`StreamFields` holds what the codecs
need from it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tritonwatch.common.kserve import model_path
from tritonwatch.kserve.payload import PayloadError, Tensor, TensorSpec
from tritonwatch.wire.datatypes import (
    TRITON_DATATYPES,
    bytes_elements,
    pack,
    serialize_bytes,
    unpack,
)
from tritonwatch.wire.kserve_protobuf import (
    ProtobufDecodeError,
    StreamInferResponseMessage,
    decode_stream_infer_response,
    encode_infer_request,
)
from tritonwatch.wire.sse import DONE

JsonScalar = str | int | float | bool

SAMPLING_PARAMETERS = "sampling_parameters"
"""The vLLM backend's input: a JSON string of sampling parameters, max_tokens among them."""
RETURN_NUM_OUTPUT_TOKENS = "return_num_output_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"
"""The vLLM backend's optional output (asked for by the input above): tokens in this response."""
ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"


class StreamDecodeError(ValueError):
    """A response that cannot be read (not JSON, not an object): a bad response, which
    is not the same as an error the server reported."""


@dataclass(frozen=True, slots=True)
class StreamFields:
    """Which inputs and outputs carry the text, and what else every request sends.

    The defaults are the TensorRT-LLM ensemble's and the vLLM backend's names.
    """

    text_input: str = "text_input"
    max_tokens_input: str = "max_tokens"
    stream_input: str = "stream"
    text_output: str = "text_output"
    parameters: Mapping[str, JsonScalar] = field(default_factory=dict)
    """Extra fields: sent as the input of that name when the model has one, else as a
    request parameter (generate, gRPC) or a body key (OpenAI). They win over the
    fields above."""
    served_name: str | None = None
    """The OpenAI ``model`` field, when the server knows the model by another name."""


@dataclass(frozen=True, slots=True)
class Piece:
    """One streamed response, read: its text (None: it carries no content), the
    server's token count for it, whether it ends the stream, and a reported error."""

    text: str | None
    tokens: int | None = None
    final: bool = False
    error: str | None = None


def _text_of(value: Any) -> str | None:
    """An output's value as text: a string, a list joined, anything else as JSON;
    None when there is none (``""``, ``[]``, null), so an empty response is no token."""
    if isinstance(value, list):
        value = "".join(item if isinstance(item, str) else json.dumps(item) for item in value)
    elif not isinstance(value, str) and value is not None:
        value = json.dumps(value)
    return value or None


def _count_of(value: Any) -> int | None:
    """A token count sent as a scalar or a list of them (summed); None when absent."""
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise StreamDecodeError(f"{NUM_OUTPUT_TOKENS} is not an integer: {value!r}")
    return sum(values)


def _json_object(data: str | bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(data)
    except ValueError as error:
        raise StreamDecodeError(f"not JSON ({error}): {data[:80]!r}") from None
    if not isinstance(decoded, dict):
        raise StreamDecodeError(f"not a JSON object: {data[:80]!r}")
    return decoded


def _error_text(error: Any) -> str:
    """Triton sends a string; OpenAI-compatible servers an object with a message (vLLM:
    ``{"message", "type", "code"}``)."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return error if isinstance(error, str) else json.dumps(error)


class _ModelFields:
    """Which of the fields a codec would send the model has, decided once per model."""

    def __init__(
        self,
        model: str,
        fields: StreamFields,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[str],
        fallback: Sequence[Tensor],
    ) -> None:
        self.fields = fields
        self.inputs = {spec.name: spec for spec in inputs}
        self.text_model = fields.text_input in self.inputs
        if not self.text_model and not fallback:
            raise PayloadError(
                model,
                fields.text_input,
                "the model has no such input and no other inputs were built "
                f"(it has: {', '.join(sorted(self.inputs)) or 'none'})",
            )
        self.fallback = tuple(fallback)
        if fields.text_output in outputs or (self.text_model and not outputs):
            self.content_outputs: tuple[str, ...] = (fields.text_output,)
        else:
            self.content_outputs = tuple(outputs)

    def values(self, prompt: str, max_tokens: int) -> dict[str, JsonScalar]:
        """The text model's fields by name: inputs it has, then the extra parameters."""
        fields, has = self.fields, self.inputs
        values: dict[str, JsonScalar] = {fields.text_input: prompt}
        if fields.max_tokens_input in has:
            values[fields.max_tokens_input] = max_tokens
        elif SAMPLING_PARAMETERS in has:
            values[SAMPLING_PARAMETERS] = json.dumps({"max_tokens": max_tokens})
        if fields.stream_input in has:
            values[fields.stream_input] = True
        if RETURN_NUM_OUTPUT_TOKENS in has:
            values[RETURN_NUM_OUTPUT_TOKENS] = True
        return values | dict(fields.parameters)

    def content(self, outputs: Mapping[str, Any]) -> str | None:
        """The text of the content outputs present in one response."""
        texts = [_text_of(outputs[name]) for name in self.content_outputs if name in outputs]
        present = [text for text in texts if text is not None]
        return "".join(present) if present else None


def _json_value(tensor: Tensor) -> Any:
    """A built tensor as a generate field: a scalar when it holds one element, else its
    flat list (BYTES as UTF-8 text)."""
    values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in tensor.values()]
    return values[0] if len(values) == 1 else values


class _KserveStreamCodec:
    """What Triton's two streaming APIs share: the model named by name and version, and
    the choice of inputs to fill, made once from its metadata."""

    def __init__(
        self,
        model: str,
        version: str,
        fields: StreamFields,
        *,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[str] = (),
        fallback: Sequence[Tensor] = (),
    ) -> None:
        """``inputs``/``outputs``: the model's metadata; ``fallback``: the plain canary's
        tensors, sent when the model has no ``fields.text_input``.

        Raises:
            PayloadError: no text input and no fallback tensors.
        """
        self._name, self._version = model, version
        self._model = _ModelFields(model, fields, inputs, outputs, fallback)


class GenerateCodec(_KserveStreamCodec):
    """Triton's ``generate_stream``: a JSON body, one JSON object per event."""

    @property
    def path(self) -> str:
        return f"{model_path(self._name, self._version)}/generate_stream"

    def encode(self, prompt: str, max_tokens: int) -> bytes:
        model = self._model
        if model.text_model:
            body: dict[str, Any] = model.values(prompt, max_tokens)
        else:
            body = {t.name: _json_value(t) for t in model.fallback} | dict(model.fields.parameters)
        return json.dumps(body, separators=(",", ":")).encode()

    def decode(self, data: str) -> Piece:
        """One event's data. Raises :class:`StreamDecodeError` when it is no JSON object."""
        response = _json_object(data)
        if "error" in response:
            return Piece(None, error=_error_text(response["error"]))
        return Piece(self._model.content(response), _count_of(response.get(NUM_OUTPUT_TOKENS)))


class OpenAICodec:
    """OpenAI-compatible streaming: chat or completions, ended by ``[DONE]``."""

    def __init__(
        self,
        model: str,
        fields: StreamFields,
        api: Literal["chat", "completions"] = "chat",
        include_usage: bool = True,
    ) -> None:
        self.api = api
        self.path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        self._model = fields.served_name or model
        self._include_usage = include_usage
        self._parameters = dict(fields.parameters)

    def encode(self, prompt: str, max_tokens: int) -> bytes:
        body: dict[str, Any] = {"model": self._model}
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body |= {"max_tokens": max_tokens, "stream": True}
        if self._include_usage:
            body["stream_options"] = {"include_usage": True}
        return json.dumps(body | self._parameters, separators=(",", ":")).encode()

    def decode(self, data: str) -> Piece:
        """One event's data. Raises :class:`StreamDecodeError` when it is neither
        ``[DONE]`` nor a JSON object with a ``choices`` list."""
        if data.strip() == DONE:
            return Piece(None, final=True)
        chunk = _json_object(data)
        if "error" in chunk:
            return Piece(None, error=_error_text(chunk["error"]))
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise StreamDecodeError(f"a chunk without a choices list: {data[:80]!r}")
        if not choices:
            usage = chunk.get("usage")
            tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
            return Piece(None, _count_of(tokens))
        choice = choices[0] if isinstance(choices[0], dict) else {}
        if self.api == "completions":
            return Piece(_text_of(choice.get("text")))
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        # Reasoning models stream their reasoning before the answer: the user waits
        # for those tokens too (vLLM's benchmark counts either).
        return Piece(_text_of(delta.get("content")) or _text_of(delta.get("reasoning_content")))


class GrpcStreamCodec(_KserveStreamCodec):
    """Triton's ``ModelStreamInfer``: serialized ``ModelInferRequest`` in,
    ``ModelStreamInferResponse`` out, both in :mod:`~tritonwatch.wire.kserve_protobuf`'s
    wire format (no ``grpc``, no ``tritonclient.grpc``)."""

    def _tensor(self, spec: TensorSpec, value: JsonScalar) -> Tensor:
        """One element of ``value`` as input ``spec`` (a -1 dim, the batch one too, is 1)."""
        shape = tuple(1 if d < 0 else d for d in spec.shape)
        if spec.datatype == "BYTES":
            text = value if isinstance(value, str) else json.dumps(value)
            return Tensor(spec.name, "BYTES", shape, serialize_bytes([text.encode()]))
        return Tensor(spec.name, spec.datatype, shape, pack(spec.datatype, [value]))

    def encode(self, prompt: str, max_tokens: int, request_id: str) -> bytes:
        """The request, with ``request_id`` (responses on one stream are told apart by
        it) and the empty final response asked for. Fields naming no input become
        request parameters."""
        model = self._model
        if model.text_model:
            tensors, values = [], model.values(prompt, max_tokens)
        else:
            tensors, values = list(model.fallback), dict(model.fields.parameters)
        parameters: dict[str, JsonScalar] = {}
        for name, value in values.items():
            spec = model.inputs.get(name)
            if spec is None:
                parameters[name] = value
            elif all(t.name != name for t in tensors):
                tensors.append(self._tensor(spec, value))
        return encode_infer_request(
            self._name,
            self._version,
            tensors,
            request_id=request_id,
            parameters=parameters | {ENABLE_EMPTY_FINAL: True},
        )

    @staticmethod
    def parse(payload: bytes) -> StreamInferResponseMessage:
        """One response message's bytes, read.

        Raises:
            StreamDecodeError: they are no ``ModelStreamInferResponse``.
        """
        try:
            return decode_stream_infer_response(payload)
        except ProtobufDecodeError as error:
            raise StreamDecodeError(f"not a ModelStreamInferResponse: {error}") from None

    def decode(self, message: StreamInferResponseMessage) -> Piece:
        """One ``ModelStreamInferResponse`` (:meth:`parse`). An in-band error clears the
        outputs.

        Raises:
            StreamDecodeError: an output's contents do not fit its datatype.
        """
        response = message.infer_response
        final = response.parameters.get(FINAL_RESPONSE) is True
        if message.error_message:
            return Piece(None, final=final, error=str(message.error_message))
        contents = list(response.raw_output_contents)
        outputs: dict[str, Any] = {}
        for index, output in enumerate(response.outputs):
            raw = bytes(contents[index]) if index < len(contents) else b""
            if output.datatype not in TRITON_DATATYPES:
                raise StreamDecodeError(f"output {output.name!r}: unknown datatype")
            try:
                if output.datatype == "BYTES":
                    outputs[output.name] = [
                        e.decode("utf-8", "replace") for e in bytes_elements(raw)
                    ]
                else:
                    outputs[output.name] = unpack(output.datatype, raw)
            except ValueError as error:
                raise StreamDecodeError(f"output {output.name!r}: {error}") from None
        tokens = _count_of(outputs.get(NUM_OUTPUT_TOKENS))
        return Piece(self._model.content(outputs), tokens, final)


_WORD_TEXT = (
    "the of and to in is it that was for on are with as his they be at one have this from "
    "or had by word but what some we can out other were all there when up use your how said "
    "an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound "
    "no most people my over know water than call first who may down side been now find any "
    "new work part take get place made live where after back little only round man year came "
    "show every good me give our under name very through just form sentence great think say "
    "help low line differ turn cause much mean before move right boy old too same tell does "
    "set three want air well also play small end put home read hand port large spell add even "
    "land here must big high such follow act why ask men change went light kind off need house "
    "picture try us again animal point mother world near build self earth father head stand own"
)
WORDS = tuple(_WORD_TEXT.split())
"""Common English words: tokenizers make about one token of each, so a prompt of N words
is about N tokens long without the canary knowing the model's tokenizer."""


def _bounds(name: str, value: int | tuple[int, int]) -> tuple[int, int]:
    low, high = value if isinstance(value, tuple) else (value, value)
    if not 0 < low <= high:
        raise ValueError(
            f"{name} must be a positive int or a (min, max) with min <= max: {value!r}"
        )
    return low, high


class PromptSampler:
    """The (prompt, max_tokens) of each streamed request, reproducible from ``seed``.

    ``prompt`` fixes the text; otherwise each prompt is ``prompt_words`` random words from
    :data:`WORDS`. An int fixes a length; a ``(min, max)`` draws it uniformly (both
    included) per request, as ``max_tokens`` does.
    """

    def __init__(
        self,
        seed: int,
        prompt: str | None = None,
        prompt_words: int | tuple[int, int] = 32,
        max_tokens: int | tuple[int, int] = 16,
    ) -> None:
        """Raises: ValueError: a length that is not positive, or a min over its max."""
        self._random = random.Random(seed)  # noqa: S311 - test traffic, not secrets
        self._prompt = prompt
        self._words = _bounds("prompt_words", prompt_words)
        self._max_tokens = _bounds("max_tokens", max_tokens)

    def sample(self) -> tuple[str, int]:
        """The next request's prompt and max_tokens."""
        prompt = self._prompt
        if prompt is None:
            prompt = " ".join(self._random.choices(WORDS, k=self._random.randint(*self._words)))
        return prompt, self._random.randint(*self._max_tokens)
