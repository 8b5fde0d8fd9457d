"""The streaming canary: a generative model's open-loop canary, timed token by token.

For an LLM the whole-request latency is not what a user feels: the wait for the first
token (TTFT) and the pace after it (ITL) are (docs/design.md §5). So the canary of a
decoupled model, or of an OpenAI-compatible server, gets a :class:`StreamSender` when
it is prepared (:class:`~tritonwatch.probe.canary.model_canary.ModelCanary`: the same open
loop, breaker, pause and caps), and each request is a stream:

    PromptSampler → codec.encode → send → every read (ChunkedDecoder → SseParser,
    or a gRPC message) → codec.decode → StreamClock.piece → StreamClock.result

and its record goes twice: to :class:`~tritonwatch.state.stream_board.StreamBoard` (TTFT,
gaps, tokens) and, as a plain request, to :class:`~tritonwatch.state.canary_board.CanaryBoard`,
so request counters, the availability SLO and the breaker count it as any other.

Timing follows the plain canary: the origin is ``max(intended, woke)``, the deadline
``intended + stream.timeout`` (the whole stream), and a request that waits for a slot
waits on its own clock (no coordinated omission). Streams go out from the canary
engine's thread, in clear or over TLS, as the plain canaries do
(:mod:`~tritonwatch.probe.canary.engine_stream` for ``generate_stream`` and OpenAI,
:mod:`~tritonwatch.probe.canary.engine_stream_grpc` for ``ModelStreamInfer``, a call per
stream): each read stamped by the kernel, decoded and timed there, the canary told once
a stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.config.canary_schema import Range, StreamConfig
from tritonwatch.kserve.payload import PayloadError, input_specs
from tritonwatch.kserve.stream_request import (
    WORDS,
    GenerateCodec,
    GrpcStreamCodec,
    OpenAICodec,
    PromptSampler,
    StreamFields,
)
from tritonwatch.probe.canary.clients import classify_error, error_text
from tritonwatch.probe.canary.engine_channels import Endpoint
from tritonwatch.probe.canary.engine_stream import (
    HttpStreamRequests,
    StreamAnswer,
    StreamRequests,
)
from tritonwatch.probe.canary.engine_stream_grpc import GrpcStreamRequests
from tritonwatch.probe.canary.engine_tls import TlsSettings
from tritonwatch.probe.canary.failures import Failure
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.library_path import LibraryPath
from tritonwatch.probe.canary.model_canary import StreamSenders
from tritonwatch.probe.canary.model_info import ModelInfo
from tritonwatch.probe.canary.plans import CanaryPlan, TensorSource, source_tensors
from tritonwatch.probe.canary.sequence import SequencePlanner
from tritonwatch.probe.canary.unary import Bookkeeper
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard

NO_OPENAI_URL = "protocol openai needs targets[].openai_url"
TOO_LONG_FOR_GRPC = (
    "the longest ModelStreamInfer request canary.stream asks for is over the 64 KiB the "
    "canary's HTTP/2 sends in one window: shorten prompt or prompt_words"
)


def openai_root(url: str) -> str:
    """Where the OpenAI routes hang: ``url`` without a trailing ``/v1``.

    Users copy the server's URL as OpenAI clients take it (``http://host:8000/v1``, the
    ``base_url`` of the openai package and of vLLM's docs), or without it; the codec's
    paths carry ``/v1`` already, so kept it would ask for ``/v1/v1/chat/completions``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit(parts._replace(path=path))


def stream_fields(stream: StreamConfig, served_name: str | None) -> StreamFields:
    """The codecs' view of ``canary.stream``."""
    return StreamFields(
        text_input=stream.text_input,
        max_tokens_input=stream.max_tokens_input,
        stream_input=stream.stream_input,
        text_output=stream.text_output,
        parameters=dict(stream.parameters),
        served_name=served_name,
    )


def _length(value: int | Range) -> int | tuple[int, int]:
    return (value.min, value.max) if isinstance(value, Range) else value


def longest_request(stream: StreamConfig) -> tuple[str, int]:
    """The largest (prompt, max_tokens) ``canary.stream`` may sample: its prompt, or
    its most words, each the longest word."""
    words, tokens = _length(stream.prompt_words), _length(stream.max_tokens)
    most = words[1] if isinstance(words, tuple) else words
    prompt = stream.prompt if stream.prompt is not None else " ".join([max(WORDS, key=len)] * most)
    return prompt, tokens[1] if isinstance(tokens, tuple) else tokens


def prompt_sampler(seed: int, stream: StreamConfig) -> PromptSampler:
    """The prompts and token counts ``canary.stream`` asks for."""
    return PromptSampler(
        seed,
        prompt=stream.prompt,
        prompt_words=_length(stream.prompt_words),
        max_tokens=_length(stream.max_tokens),
    )


class StreamSource(TensorSource, Protocol):
    """What the codecs need to know of who streams: a canary's plan, or a sweep's
    settings (the model and its inputs for a model without a text input, plans.py's
    :class:`TensorSource`, and the stream)."""

    @property
    def version(self) -> str: ...
    @property
    def protocol(self) -> str: ...
    @property
    def stream(self) -> StreamConfig: ...


def openai_codec(source: StreamSource, fields: StreamFields) -> OpenAICodec:
    """The OpenAI codec ``source.stream`` asks for (chat or completions, usage or not)."""
    api, usage = source.stream.openai_api, source.stream.include_usage
    return OpenAICodec(source.model, fields, api=api, include_usage=usage)


def kserve_codec(
    source: StreamSource,
    fields: StreamFields,
    metadata: dict[str, Any],
    config: dict[str, Any] | None,
) -> GenerateCodec | GrpcStreamCodec:
    """The generate_stream (HTTP) or ModelStreamInfer (gRPC) codec for the model's
    metadata and config: its text input, or the plain canary's tensors when it has none.

    Raises:
        PayloadError: an input that cannot be built.
    """
    specs = input_specs(source.model, metadata, config)
    fallback = []
    if fields.text_input not in {spec.name for spec in specs}:
        fallback = source_tensors(source, specs)
    outputs = [str(o["name"]) for o in metadata.get("outputs", [])]
    kind = GrpcStreamCodec if source.protocol == "grpc" else GenerateCodec
    return kind(
        source.model, source.version, fields, inputs=specs, outputs=outputs, fallback=fallback
    )


class StreamSender:
    """One streaming model's requests as the engine streams them, and the record of
    each stream (:meth:`record`). Made once, when the canary is prepared
    (:func:`stream_sender`)."""

    library: LibraryPath | None = None  # the engine streams every request
    sequence: SequencePlanner | None = None
    tensor_format = "stream"

    def __init__(
        self,
        plan: CanaryPlan,
        stats: CanaryBoard,
        stream_board: StreamBoard,
        books: Bookkeeper,
        streams: tuple[StreamRequests, Endpoint],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._plan = plan
        self._stats = stats
        self._stream_board = stream_board
        self._books = books
        self._streams = streams
        self._clock = clock
        self.left_engine = asyncio.Event()  # never set: streams never leave the engine

    @property
    def timeout(self) -> float:
        return self._plan.stream.timeout

    def engine_request(self) -> tuple[StreamRequests, Endpoint]:
        return self._streams

    def planned(self, intended: float) -> None:
        """Nothing to plan: each stream's prompt is sampled as it is sent."""

    def cancel(self) -> None:
        """Nothing runs on the loop."""

    def record(self, intended: float, answer: Any, woke: float | None = None) -> None:
        """One stream the engine ended (on its thread): its pieces and how it ended, to
        the stream board and, as a plain request, to the canary board."""
        if isinstance(answer, StreamAnswer):
            clock, end, error = answer.clock, answer.end, answer.error
        else:  # failed before it went out (no connection, none free in time)
            assert isinstance(answer, BaseException), "a stream's wire answers StreamAnswer"
            clock, end, error = StreamClock(0.0), None, answer
        clock.origin = intended if woke is None else max(intended, woke)
        plan = self._plan
        failure: Outcome | None = None
        text = ""
        entry: Failure | None = None
        if error is not None:
            failure = classify_error(error, plan.protocol)
            text = error_text(error, timeout=plan.stream.timeout)
            entry = self._books.failure_of(error, failure, text)
        result = clock.result(
            target=plan.target,
            model=plan.model,
            protocol=plan.protocol,
            at=self._clock(),
            end=end,
            failure=failure,
            error=text,
            send_lateness_seconds=clock.origin - intended,
        )
        if failure is None and result.outcome != Outcome.SUCCESS:
            entry = Failure(result.outcome, result.error, None)  # in-band error, no output
        self._books.tally(result.outcome, entry)
        self._stream_board.record(result)
        self._stats.record(_as_request(result, plan.stream.timeout).as_canary_result())


def stream_requests(
    plan: CanaryPlan, model: ModelInfo | None, seed: int
) -> tuple[StreamRequests, Endpoint]:
    """The engine's stream requests of ``plan`` and where they go: generate_stream or
    ModelStreamInfer for the model's ``(metadata, config)``, OpenAI for ``None``.

    Raises:
        PayloadError: the model cannot be streamed from (no text input and no other
            inputs to send, no OpenAI URL, a gRPC request larger than the engine sends).
    """
    fields = stream_fields(plan.stream, plan.served_name)
    sample = prompt_sampler(seed, plan.stream).sample
    if model is None:
        if plan.openai_url is None:
            raise PayloadError(plan.model, "openai_url", NO_OPENAI_URL)
        endpoint, host, prefix = _endpoint(openai_root(plan.openai_url), plan.tls, grpc=False)
        return HttpStreamRequests(host, prefix, openai_codec(plan, fields), sample), endpoint
    codec = kserve_codec(plan, fields, *model)
    if isinstance(codec, GrpcStreamCodec):
        endpoint, host, _ = _endpoint(plan.grpc_url, plan.tls, grpc=True)
        requests = GrpcStreamRequests(host, codec, sample, plan.stream.timeout)
        if not requests.fits(*longest_request(plan.stream)):
            raise PayloadError(plan.model, "canary.stream", TOO_LONG_FOR_GRPC)
        return requests, endpoint
    endpoint, host, prefix = _endpoint(plan.http_url, plan.tls, grpc=False)
    return HttpStreamRequests(host, prefix, codec, sample), endpoint


def stream_senders(stats: CanaryBoard, stream_board: StreamBoard) -> StreamSenders:
    """The factory a canary makes its streaming sender with (model_canary.py), recording
    to ``stats`` and ``stream_board``."""

    async def make(
        plan: CanaryPlan,
        client: InferenceClient,
        books: Bookkeeper,
        model: ModelInfo | None,
        seed: int,
    ) -> StreamSender:
        streams = stream_requests(plan, model, seed)
        return StreamSender(plan, stats, stream_board, books, streams)

    return make


def _endpoint(url: str, tls: ClientTLS | None, *, grpc: bool) -> tuple[Endpoint, str, str]:
    """The engine's endpoint for ``url``, its ``host:port`` (the Host header or gRPC
    authority) and its path (the prefix of an HTTP stream's route)."""
    parts = urlsplit(url if "://" in url else f"grpc://{url}")
    secure = tls_for(url, tls)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure is not None else 80)
    settings = None
    if secure is not None:
        settings = TlsSettings(secure.ssl_context(("h2",) if grpc else ()), host)
    return (host, port, settings), parts.netloc or f"{host}:{port}", parts.path.rstrip("/")


def _as_request(result: StreamResult, timeout: float) -> StreamResult:
    """The whole-stream latency as the plain canary counts a request's: the timeout for
    a timeout, nothing for a failure that says nothing about time."""
    if result.outcome == Outcome.TIMEOUT:
        return replace(result, total_seconds=timeout)
    if result.outcome not in (Outcome.SUCCESS, Outcome.BAD_RESPONSE):
        return replace(result, total_seconds=None)
    return result
