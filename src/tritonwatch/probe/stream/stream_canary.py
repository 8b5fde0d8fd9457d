"""The streaming canary: a generative model's open-loop canary, timed token by token.

For an LLM the whole-request latency is not what a user feels: the wait for the first
token (TTFT) and the pace after it (ITL) are (docs/design.md §5). So a decoupled model,
or an OpenAI-compatible server, gets :class:`StreamingCanary`: the same open loop,
breaker, pause and caps as :class:`~tritonwatch.probe.canary.model_canary.ModelCanary` (it *is*
one, with the send replaced), but each request is a stream:

    PromptSampler → codec.encode → send → every read (ChunkedDecoder → SseParser,
    or a gRPC message) → codec.decode → StreamClock.piece → StreamClock.result

and its record goes twice: to :class:`~tritonwatch.state.stream_board.StreamBoard` (TTFT,
gaps, tokens) and, as a plain request, to :class:`~tritonwatch.state.canary_board.CanaryBoard`,
so request counters, the availability SLO and the breaker count it as any other.

Timing follows the plain canary: the origin is ``max(intended, woke)``, the deadline
``intended + stream.timeout`` (the whole stream), and a request that waits for a slot
waits on its own clock (no coordinated omission). Plaintext streams go out from the
canary engine's thread, as the plain canaries do (:mod:`~tritonwatch.probe.canary.engine_stream`
for ``generate_stream`` and OpenAI, :mod:`~tritonwatch.probe.canary.engine_stream_grpc` for
``ModelStreamInfer``, a call per stream: each read stamped by the kernel, decoded and
timed there, the canary told once a stream); over TLS, or with no engine (a tool), on
the canary's event loop: HTTP on the lean HTTP/1.1 pool
(:meth:`~tritonwatch.probe.canary.engine_http.ConnectionPool.stream`, each read stamped as it
arrives), gRPC over one long-lived ``ModelStreamInfer`` call
(:class:`~tritonwatch.probe.grpc_stream.GrpcStreamSession`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.common.logs import get_logger
from tritonwatch.config.canary_schema import InputOverride, Range, StreamConfig
from tritonwatch.probe.canary.clients import classify_error, error_text
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_http import ConnectionPool, encode_request
from tritonwatch.probe.canary.engine_stream import (
    STREAM_HEADERS,
    UNFINISHED_EVENT,
    HttpStreamRequests,
    StreamAnswer,
    StreamRequests,
)
from tritonwatch.probe.canary.engine_stream_grpc import GrpcStreamRequests
from tritonwatch.probe.canary.engine_wires import RawAnswer
from tritonwatch.probe.canary.failures import Failure
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.model_info import report_skipped
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import DYNAMIC_DIM, CanaryPlan
from tritonwatch.probe.grpc_stream import GrpcStreamSession, open_channel
from tritonwatch.probe.interfaces import InferenceClient
from tritonwatch.probe.payload import PayloadError, build_inputs, input_specs
from tritonwatch.probe.stream_request import (
    WORDS,
    GenerateCodec,
    GrpcStreamCodec,
    OpenAICodec,
    PromptSampler,
    StreamDecodeError,
    StreamFields,
)
from tritonwatch.probe.stream_timing import StreamClock
from tritonwatch.records.observations import Outcome, StreamResult
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.state.stream_board import StreamBoard
from tritonwatch.wire.sse import SseParser

_log = get_logger("canary")
CLOSE_SECONDS = 1.0
"""How long closing a transport may take when the canary stops (bounded shutdown)."""
NO_OPENAI_URL = "protocol openai needs targets[].openai_url"


def openai_root(url: str) -> str:
    """Where the OpenAI routes hang: ``url`` without a trailing ``/v1``.

    Users copy the server's URL as OpenAI clients take it (``http://host:8000/v1``, the
    ``base_url`` of the openai package and of vLLM's docs), or without it; the codec's
    paths carry ``/v1`` already, so kept it would ask for ``/v1/v1/chat/completions``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit(parts._replace(path=path))


class StreamTransport(Protocol):
    """Sends one streamed request and feeds its pieces to ``clock`` as they arrive."""

    async def send(self, prompt: str, max_tokens: int, clock: StreamClock) -> float | None:
        """Returns when the stream ended (None: the pieces say); raises how it failed."""
        ...

    async def close(self) -> None: ...


class HttpStream:
    """``generate_stream`` or OpenAI streaming: one POST, an SSE body read as it arrives."""

    def __init__(
        self,
        url: str,
        ssl_context: ssl.SSLContext | None,
        limit: int,
        codec: GenerateCodec | OpenAICodec,
    ) -> None:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or "127.0.0.1"
        self._host = parts.netloc or f"{host}:{port}"
        self._prefix = parts.path.rstrip("/")
        self._pool = ConnectionPool(host, port, ssl_context, limit)
        self._codec = codec
        self._address = None if ssl_context is not None else (host, port)

    def engine_requests(
        self, sample: Callable[[], tuple[str, int]]
    ) -> tuple[str, int, StreamRequests] | None:
        """(host, port, requests) for the canary engine to stream from; None over TLS
        (``ssl`` on non-blocking sockets needs the event loop)."""
        if self._address is None:
            return None
        requests = HttpStreamRequests(self._host, self._prefix, self._codec, sample)
        return (*self._address, requests)

    async def send(self, prompt: str, max_tokens: int, clock: StreamClock) -> float | None:
        codec = self._codec
        body = codec.encode(prompt, max_tokens)
        request = encode_request(
            "POST", self._host, self._prefix + codec.path, body, STREAM_HEADERS
        )
        parser = SseParser()
        end: float | None = None
        async with contextlib.aclosing(self._pool.stream(request)) as reads:
            async for data, stamp in reads:
                for event in parser.feed(data, stamp):
                    clock.piece(event.stamp, codec.decode(event.data))
                end = stamp
        if parser.pending:
            raise StreamDecodeError(UNFINISHED_EVENT)
        return end

    async def close(self) -> None:
        self._pool.close()


class GrpcStream:
    """Triton's ``ModelStreamInfer``: requests up the canary's one call, responses by id."""

    def __init__(
        self,
        session: Callable[[], GrpcStreamSession],
        codec: GrpcStreamCodec,
        address: tuple[str, int] | None = None,
    ) -> None:
        """``session``: opens the event loop's call, on the first :meth:`send` (so a
        canary the engine streams for never imports ``grpc``); ``address``: (host, port)
        of a plaintext target, which the engine may stream from instead (None: TLS, or
        not known)."""
        self._open_session = session
        self._session_: GrpcStreamSession | None = None
        self._codec = codec
        self._address = address

    def _session(self) -> GrpcStreamSession:
        if self._session_ is None:
            self._session_ = self._open_session()
        return self._session_

    def engine_requests(
        self, sample: Callable[[], tuple[str, int]], timeout: float, longest: tuple[str, int]
    ) -> tuple[str, int, StreamRequests] | None:
        """(host, port, requests) for the canary engine to stream from; None over TLS or
        when ``longest`` (the largest prompt and token count asked for) would not fit
        one flow-control window."""
        if self._address is None:
            return None
        host, port = self._address
        requests = GrpcStreamRequests(f"{host}:{port}", self._codec, sample, timeout)
        return (host, port, requests) if requests.fits(*longest) else None

    async def send(self, prompt: str, max_tokens: int, clock: StreamClock) -> float | None:
        session = self._session()
        request_id, responses = await session.request(prompt, max_tokens)
        try:
            while not clock.done:
                item = await responses.get()
                if isinstance(item, BaseException):
                    raise item
                stamp, message = item
                clock.piece(stamp, self._codec.decode(message))
        finally:
            session.done(request_id)
        return None

    async def close(self) -> None:
        if self._session_ is not None:
            await self._session_.close()


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


class StreamSource(Protocol):
    """What the codecs need to know of who streams: a canary's plan, or a sweep's
    settings (the model, its inputs for a model without a text input, the stream)."""

    @property
    def model(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def protocol(self) -> str: ...
    @property
    def stream(self) -> StreamConfig: ...
    @property
    def inputs(self) -> dict[str, InputOverride]: ...
    @property
    def data(self) -> str: ...
    @property
    def string_length(self) -> int: ...
    @property
    def string_data(self) -> str | None: ...


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
        fallback = build_inputs(
            source.model,
            specs,
            source.inputs,
            "zero" if source.data == "zero" else "random",
            string_length=source.string_length,
            string_data=source.string_data,
            dynamic_dim=DYNAMIC_DIM,
        )
    outputs = [str(o["name"]) for o in metadata.get("outputs", [])]
    kind = GrpcStreamCodec if source.protocol == "grpc" else GenerateCodec
    return kind(
        source.model, source.version, fields, inputs=specs, outputs=outputs, fallback=fallback
    )


def open_transport(
    url: str,
    tls: ClientTLS | None,
    limit: int,
    codec: GenerateCodec | OpenAICodec | GrpcStreamCodec,
) -> StreamTransport:
    """The transport for ``codec``: one ModelStreamInfer call for gRPC (opened on first
    use), else a keep-alive pool of at most ``limit`` HTTP/1.1 connections."""
    if isinstance(codec, GrpcStreamCodec):
        grpc_codec = codec

        def session() -> GrpcStreamSession:  # the event loop's call, on its first send
            return GrpcStreamSession(open_channel(url, tls), grpc_codec)

        parts = urlsplit(url if "://" in url else f"grpc://{url}")
        host, port = parts.hostname, parts.port
        address = (host, port) if tls_for(url, tls) is None and host and port else None
        return GrpcStream(session, codec, address)
    secure = tls_for(url, tls)
    context = secure.ssl_context() if secure is not None else None
    return HttpStream(url, context, limit, codec)


class StreamingCanary(ModelCanary):
    """Streams one model's canary until cancelled; results go to both statistics."""

    def __init__(
        self,
        plan: CanaryPlan,
        client: InferenceClient,
        stats: CanaryBoard,
        stream_board: StreamBoard,
        *,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        engine: CanaryEngine | None = None,
        pauses: Pauses | None = None,
    ) -> None:
        super().__init__(plan, client, stats, seed=seed, clock=clock, engine=engine, pauses=pauses)
        self._stream_board = stream_board
        self._sampler = prompt_sampler(self._random.getrandbits(32), plan.stream)
        self._transport: StreamTransport | None = None

    def hands_over(self) -> bool:
        return False

    @property
    def tensor_format(self) -> str:
        return "stream"

    async def choose_tensor_format(self) -> None:
        """Nothing to choose: streams are JSON (HTTP) or protobuf (gRPC)."""

    async def prepare(self) -> bool:
        """Builds the transport and its codec from the model's metadata (none for an
        OpenAI server, which has no KServe API), retrying while the server is away.
        Returns False, after one ``canary_skipped`` line, when the model cannot be
        streamed from (no text input and no other inputs to send, no OpenAI URL)."""
        plan = self.plan
        try:
            transport = await self._new_transport()
        except PayloadError as error:
            report_skipped(plan, self._stats, error, self._clock())
            return False
        await self._close_transport()  # a prepare again (never, today) drops the old one
        self._transport = transport
        self._stats.set_skipped(plan.key, None)
        return True

    async def _new_transport(self) -> StreamTransport:
        plan = self.plan
        fields = stream_fields(plan.stream, plan.served_name)
        limit = plan.max_in_flight
        if plan.protocol == "openai":
            if plan.openai_url is None:
                raise PayloadError(plan.model, "openai_url", NO_OPENAI_URL)
            root = openai_root(plan.openai_url)
            return open_transport(root, plan.tls, limit, openai_codec(plan, fields))
        metadata, config = await self._model_info()
        codec = kserve_codec(plan, fields, metadata, config)
        url = plan.grpc_url if plan.protocol == "grpc" else plan.http_url
        return open_transport(url, plan.tls, limit, codec)

    @property
    def request_timeout(self) -> float:
        return self.plan.stream.timeout

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self._close_transport()

    async def _close_transport(self) -> None:
        transport, self._transport = self._transport, None
        if transport is None:
            return
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                await transport.close()
        except Exception as error:  # closing must never block shutdown
            _log.debug("canary_stream_close_failed", error=str(error))

    async def _run_on_engine(self, first_send: float) -> bool:
        """Hands a plaintext stream (generate_stream, OpenAI, gRPC ModelStreamInfer) to
        the canary engine, which streams until this task is cancelled; False for TLS,
        no engine, a gRPC request too large for it, or a host that does not resolve
        (the event loop then streams)."""
        transport, plan = self._transport, self.plan
        found = None
        if self._engine is None:
            return False
        if isinstance(transport, HttpStream):
            found = transport.engine_requests(self._sampler.sample)
        elif isinstance(transport, GrpcStream):
            found = transport.engine_requests(
                self._sampler.sample, plan.stream.timeout, longest_request(plan.stream)
            )
        if found is None:
            return False
        host, port, requests = found
        return await self._serve_on_engine(host, port, requests, plan.stream.timeout, first_send)

    def answered(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        """One stream the engine ended (on its thread): recorded as :meth:`_send`
        records the event loop's."""
        if isinstance(answer, StreamAnswer):
            clock, end, error = answer.clock, answer.end, answer.error
        else:  # failed before it went out (no connection, none free in time)
            assert isinstance(answer, BaseException), "a stream's wire answers StreamAnswer"
            clock, end, error = StreamClock(0.0), None, answer
        clock.origin = max(intended, woke)
        self._finish_stream(intended, clock, end, error)

    async def _send(self, intended: float, woke: float) -> None:
        plan, transport = self.plan, self._transport
        assert transport is not None, "prepare() builds the transport before any send"
        clock = StreamClock(max(intended, woke))
        prompt, max_tokens = self._sampler.sample()
        end: float | None = None
        failed: Exception | None = None
        try:
            async with asyncio.timeout_at(intended + plan.stream.timeout):
                async with self._slots:
                    end = await transport.send(prompt, max_tokens, clock)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # every failure is an outcome, never a crash
            failed = error
        self._finish_stream(intended, clock, end, failed)

    def _finish_stream(
        self, intended: float, clock: StreamClock, end: float | None, error: BaseException | None
    ) -> None:
        """Records one stream, whichever path sent it: ``clock``'s pieces, when its body
        ended, and the error it ended with (None: the pieces say how it went)."""
        plan = self.plan
        failure: Outcome | None = None
        text = ""
        entry: Failure | None = None
        if error is not None:
            failure = classify_error(error, plan.protocol)
            text = error_text(error, timeout=plan.stream.timeout)
            entry = self.failure_of(error, failure, text)
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
        self.account(result.outcome, entry)
        self._stream_board.record(result)
        self._stats.record(_as_request(result, plan.stream.timeout).as_canary_result())


def _as_request(result: StreamResult, timeout: float) -> StreamResult:
    """The whole-stream latency as the plain canary counts a request's: the timeout for
    a timeout, nothing for a failure that says nothing about time."""
    if result.outcome == Outcome.TIMEOUT:
        return replace(result, total_seconds=timeout)
    if result.outcome not in (Outcome.SUCCESS, Outcome.BAD_RESPONSE):
        return replace(result, total_seconds=None)
    return result
