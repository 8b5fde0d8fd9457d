"""The canary: a small, steady, open-loop load on every model, measured end to end.

Open loop: requests leave on schedule whether or not earlier ones returned, and
latency counts from the *intended* send time. When a server stalls, the requests
scheduled meanwhile wait for an in-flight slot with their clocks running, and time
out at ``intended + timeout``; the stall shows in the tail instead of being hidden
(coordinated omission). Each model runs as its own task: a slow target delays no other.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.probe.canary import breaker
from tritonwatch.probe.canary.answer_verdict import judge_answer, recorded_latency
from tritonwatch.probe.canary.clients import (
    BINARY_TENSOR_EXTENSION,
    GrpcInferenceClient,
    HttpInferenceClient,
    classify_error,
    error_text,
    grpc_infer_answer,
    http_infer_answer,
    http_status,
    is_refused_connection,
)
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_stream import StreamRequests
from tritonwatch.probe.canary.engine_tls import TlsSettings
from tritonwatch.probe.canary.engine_wires import (
    GrpcAnswer,
    RawAnswer,
    VaryingRequests,
    answer_body,
)
from tritonwatch.probe.canary.failures import Failure, FailureLog
from tritonwatch.probe.canary.library_fallback import LibraryFallback, error_start
from tritonwatch.probe.canary.library_path import LibraryCall
from tritonwatch.probe.canary.model_info import fetch_model_info, is_decoupled, report_skipped
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import DYNAMIC_DIM, CanaryPlan
from tritonwatch.probe.canary.refusals import REFUSED_PROBE_SECONDS
from tritonwatch.probe.canary.request_source import CanaryRequests, varying_requests
from tritonwatch.probe.canary.send_gates import SendGates
from tritonwatch.probe.canary.sequence import control_inputs
from tritonwatch.probe.canary.timing import WakeTimer
from tritonwatch.probe.infer_response import HttpAnswerDecoder
from tritonwatch.probe.interfaces import InferenceClient
from tritonwatch.probe.payload import PayloadError, Tensor, build_inputs, input_specs
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.limits import LimitedRequest

_log = get_logger("canary")
STALL_INTERVALS = 3
"""Intervals without an outcome, plus one timeout, after which a canary is stalled."""
POISSON_STALL_INTERVALS = 15
"""The same for a Poisson schedule, whose gaps are random: one gap in e³ is over three
mean intervals, one in e¹⁵ over fifteen."""


class ModelCanary:
    """Fires one model's canary until cancelled; results go to ``stats``.

    Threads (engine.py): the loop prepares and, off the engine, sends; on it the engine's
    thread asks :meth:`next_gap`, :meth:`may_send`, hands :meth:`answered`, and second
    opinions end on the loop. Beside each attribute: who writes it (liveness reads)."""

    def __init__(
        self,
        plan: CanaryPlan,
        client: InferenceClient,
        stats: CanaryBoard,
        *,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        engine: CanaryEngine | None = None,
        pauses: Pauses | None = None,
    ) -> None:
        self.plan = plan
        self._engine = engine  # plain-HTTP canaries send from it when given, else the loop
        self._client = client
        self._stats = stats
        self._random = random.Random(seed)  # noqa: S311 - the sending thread's (gaps, jitter)
        self._clock = clock
        self._slots = asyncio.Semaphore(plan.max_in_flight)  # the loop's (its sends)
        self._binary = False  # the loop's, before the first send; read-only after
        """Binary tensors (Triton's extension) or JSON: see :meth:`choose_tensor_format`."""
        self._failure_log = FailureLog(plan.target, plan.model, plan.protocol, clock=clock)
        self._tensors: list[Tensor] = []  # the loop's, in prepare; read-only after
        self._requests: CanaryRequests | None = None
        """Requests made per send (stateful, cached, sampled models); None: ``_tensors``.
        Made in prepare; the sending thread plans each send, ``finish`` ends it."""
        self._outputs: list[str] = []  # the loop's, in prepare; read-only after
        self._answers = HttpAnswerDecoder(plan.limits)
        """Reads the engine's HTTP answers (the engine's thread), remembering the last
        good one's layout."""
        self._fallback = LibraryFallback(
            {"target": plan.target, "model": plan.model, "protocol": plan.protocol},
            self._library_call,
            clock=clock,
        )
        """Second opinions on answers our readers refused, and the library path: the
        loop's (the engine's thread only asks ``should_ask``)."""
        self._engine_left = asyncio.Event()  # the loop's
        """Set when the library read what we could not: the canary leaves the engine."""
        self._loop: asyncio.AbstractEventLoop | None = None  # set by the loop in run
        self._finishing = threading.Lock()
        """:meth:`finish` runs on the engine's thread and, for a second opinion, on the
        event loop's: one at a time (the failure log and ``_requests.finished`` too)."""
        self._pending: set[asyncio.Task[None]] = set()  # the loop's
        self._timer = WakeTimer()  # the loop's
        self._gates = SendGates(plan, stats, pauses)
        """The pause, breaker and refusal watch: the sending thread's (send_gates.py)."""
        self.decoupled = False
        """The model's config says ``model_transaction_policy.decoupled`` (the loop's,
        in prepare)."""
        self._began: float | None = None  # when it began sending (its clock; the loop's)

    @property
    def paused(self) -> bool:
        """Whether its model's pause (the runner's, pauses.py) holds it back."""
        return self._gates.paused

    @property
    def sending_since(self) -> float | None:
        """When it began sending (its clock), after the metadata and config came, or its
        model's last resume if later: from then on it owes an outcome about once per
        interval (canary_liveness.py); None before."""
        return self._gates.owed_since(self._began)

    async def prepare(self) -> bool:
        """Builds the payload from metadata/config, retrying with backoff while the server
        is unreachable. Returns False when the model cannot be filled, after one
        ``canary_skipped`` log line, with the reason kept in the statistics (the
        ``tritonwatch_canary_skipped`` metric, the status page)."""
        plan = self.plan
        metadata, config = await self._model_info()
        if self.hands_over():
            return True  # the streaming canary builds its own requests
        try:
            controls = control_inputs(config)  # Triton fills them: never sent
            specs = [s for s in input_specs(plan.model, metadata, config) if s.name not in controls]
            tensors = build_inputs(
                plan.model,
                specs,
                plan.inputs,
                "zero" if plan.data == "zero" else "random",
                string_length=plan.string_length,
                string_data=plan.string_data,
                dynamic_dim=DYNAMIC_DIM,
            )
            poisson = self._random if plan.poisson else None
            first, self._requests = varying_requests(plan, config, specs, tensors, poisson=poisson)
            self._tensors = list(first)
        except PayloadError as error:
            report_skipped(plan, self._stats, error, self._clock())
            return False
        self._stats.set_skipped(plan.key, None)
        self._outputs = [str(o["name"]) for o in metadata.get("outputs", [])]
        return True

    async def _model_info(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The model's metadata and config (probe/canary/model_info.py: retried while the
        server is unreachable); also notes whether the config says it is decoupled."""
        metadata, config = await fetch_model_info(self._client, self.plan, self._stats)
        self.decoupled = is_decoupled(config)
        return metadata, config

    def hands_over(self) -> bool:
        """Whether this canary stops after :meth:`prepare` for a streaming one to take
        over: a decoupled model answers a plain infer with an error (Triton's HTTP
        endpoint refuses it outright), so the plain canary never sends to one."""
        return self.decoupled

    async def choose_tensor_format(self) -> None:
        """HTTP: binary tensors when the server's own metadata (``GET /v2``) lists the
        ``binary_tensor_data`` extension, JSON tensors otherwise.

        Asked, not guessed from errors: Seldon MLServer answers a binary body with 500,
        which no status rule tells from a broken model. Without ``/v2`` (a proxy that
        blocks it, a broken server) JSON is the fallback: the one form the KServe v2
        protocol has every server read.
        """
        plan = self.plan
        if plan.protocol != "http":
            return
        try:
            async with asyncio.timeout(plan.timeout):
                extensions = await self._client.extensions()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # any failure: fall back, never stop the canary
            self._binary = False
            _log.warning(
                "canary_server_metadata_unavailable",
                target=plan.target,
                model=plan.model,
                outcome=str(classify_error(error, plan.protocol)),
                error=error_text(error, timeout=plan.timeout),
                tensors="json",
            )
            return
        self._binary = BINARY_TENSOR_EXTENSION in extensions

    @property
    def tensor_format(self) -> str:
        """``binary`` or ``json`` (HTTP); ``grpc`` for the gRPC canary, which has one form."""
        if self.plan.protocol != "http":
            return "grpc"
        return "binary" if self._binary else "json"

    def _gap(self) -> float:
        """The gap after the next send (a sequence's plan, probe/canary/sequence.py)."""
        if self._requests is not None and self._requests.sequence is not None:
            return self._requests.sequence.gap()
        mean = 1.0 / self.plan.rate
        return self._random.expovariate(self.plan.rate) if self.plan.poisson else mean

    async def run(self) -> None:
        """Prepares, then sends on schedule forever (until the task is cancelled)."""
        if not await self.prepare() or self.hands_over():
            return
        await self.choose_tensor_format()
        _log.info(
            "canary_started",
            target=self.plan.target,
            model=self.plan.model,
            rate=self.plan.rate,
            protocol=self.plan.protocol,
            tensors=self.tensor_format,
        )
        loop = self._loop = asyncio.get_running_loop()
        self._began = self._clock()
        next_send = loop.time() + self._random.uniform(0, 1.0 / self.plan.rate)
        if await self._run_on_engine(next_send):
            return
        self._gates.take_over()  # the loop sends from here (the engine has let go)
        next_send = max(next_send, loop.time())  # (after a stay on the engine)
        try:
            while True:
                # Each request's task is made as soon as the one before has gone out and
                # waits for its own send time (canary_timing: the loop and the OS wake
                # late, its spin absorbs that); this loop only resumes when it has sent
                # or decided not to, in the same loop turn: one wake-up per request.
                gone: asyncio.Future[None] = loop.create_future()
                following = next_send + self._gap()  # asked before may_send, as the engine asks
                task = asyncio.create_task(self._one(next_send, gone))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
                await gone
                next_send = following
                if next_send < loop.time() - self.plan.timeout:
                    # The loop itself fell far behind (suspended process): skip ahead
                    # rather than firing a burst of stale requests at once.
                    next_send = loop.time()
        finally:
            for task in list(self._pending):
                task.cancel()
            self._failure_log.flush()

    async def _run_on_engine(self, first_send: float) -> bool:
        """Hands an HTTP or gRPC canary (in clear or over TLS) to the engine
        (probe/canary/engine.py), which sends until this task is cancelled; False when
        there is no engine, a gRPC request is too large for the engine, or the host
        does not resolve (the event loop then sends)."""
        client, plan = self._client, self.plan
        if self._engine is None:
            return False
        request: bytes | UnaryRequest | VaryingRequests | None = None
        endpoint: tuple[str, int, TlsSettings | None] | None = None
        if isinstance(client, HttpInferenceClient | GrpcInferenceClient):
            endpoint = client.engine_endpoint
        if isinstance(client, HttpInferenceClient):
            client.close_idle_connections()  # once on the engine, its pool is for metadata
        if self._requests is not None:
            request = self._requests.engine_requests(client, binary=self._binary)
        elif isinstance(client, HttpInferenceClient):
            request = LimitedRequest(
                client.infer_request(plan.model, plan.version, self._tensors, binary=self._binary),
                plan.limits,
            )
        elif isinstance(client, GrpcInferenceClient):
            request = client.engine_request(
                plan.model, plan.version, self._tensors, timeout=plan.timeout
            )
            if request is not None:
                request = replace(request, limits=plan.limits)
        if request is None or endpoint is None:
            return False
        host, port, tls = endpoint
        return await self._serve_on_engine(host, port, request, plan.timeout, first_send, tls=tls)

    async def _serve_on_engine(
        self,
        host: str,
        port: int,
        request: bytes | UnaryRequest | StreamRequests | VaryingRequests,
        timeout: float,
        first_send: float,
        *,
        tls: TlsSettings | None = None,
    ) -> bool:
        """Sends ``request`` from the engine (over ``tls`` when given) until this task
        is cancelled; False when the host does not resolve (after a
        ``canary_engine_unavailable`` line) or the canary left the engine for the
        library path (:class:`LibraryFallback`: the event loop then sends)."""
        plan = self.plan
        assert self._engine is not None
        serving = asyncio.ensure_future(
            self._engine.serve(
                self,
                host,
                port,
                request,
                timeout=timeout,
                max_in_flight=plan.max_in_flight,
                first_send=first_send,
                tls=tls,
            )
        )
        leaving = asyncio.ensure_future(self._engine_left.wait())
        try:
            try:
                await asyncio.wait((serving, leaving), return_when=asyncio.FIRST_COMPLETED)
            finally:
                serving.cancel()  # the engine lets the canary go (or already did)
                leaving.cancel()
                await asyncio.wait((serving, leaving))
            if not serving.cancelled():
                serving.result()  # how it ended, if not by leaving: OSError
            if self._fallback.active:
                return False
        except OSError as error:
            _log.warning(
                "canary_engine_unavailable",
                target=plan.target,
                model=plan.model,
                error=str(error)[:200],
            )
            return False
        finally:
            self._failure_log.flush()
        return True

    async def _one(self, intended: float, gone: asyncio.Future[None] | None = None) -> None:
        """One request, latency from when the loop woke for it (``intended`` or a little
        later) to its answer's last byte (or to the failure, or the timeout), however long
        it waited for a slot. ``gone`` is set at the send time, once the pause and the
        breaker have had their say."""
        try:
            await self._timer.sleep_until(intended)
            woke = time.monotonic()
            allowed = self.may_send(intended)
        finally:
            if gone is not None and not gone.done():
                gone.set_result(None)
        if allowed:
            await self._send(intended, woke)

    async def _send(self, intended: float, woke: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = intended + self.plan.timeout
        try:
            async with asyncio.timeout_at(deadline):
                async with self._slots:
                    result = await self._infer(max(0.001, deadline - loop.time()), intended)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # every failure is an outcome, never a crash
            if self._fallback.should_ask(error):
                await self._second_opinion(intended, woke, error, b"", time.monotonic())
                return
            self.finish(intended, error, woke)
            return
        self.finish(intended, result, woke)

    def _library_call(self) -> LibraryCall:
        """The library call of this canary's request (probe/canary/library_path.py)."""
        client, plan = self._client, self.plan
        if self._requests is not None:
            return self._requests.library_call(client, binary=self._binary)
        if isinstance(client, HttpInferenceClient):
            request = client.infer_request(
                plan.model, plan.version, self._tensors, binary=self._binary
            )
            return client.library_call(request, plan.limits)
        if isinstance(client, GrpcInferenceClient):
            message = client.message(plan.model, plan.version, self._tensors)
            return client.library_call(message, plan.limits)
        raise TypeError(f"no library path for a {type(client).__name__}")

    async def _second_opinion(
        self, intended: float, woke: float, error: BaseException, start: bytes, ended: float
    ) -> None:
        """Records the request whose answer our reader refused with ``error``: a
        ``client_error`` when the library reads the same request's answer (the canary
        then leaves the engine), else ``error`` as the server's, timed to ``ended``."""
        verdict = await self._fallback.second_opinion(
            error, start, self._outputs, self.plan.timeout
        )
        if self._fallback.active:
            self._engine_left.set()
        self.finish(intended, verdict, woke, ended=ended)

    def _ask_library(
        self, intended: float, woke: float, error: BaseException, start: bytes, ended: float
    ) -> None:
        """On the event loop: a second opinion for an answer the engine's reader refused."""
        task = asyncio.ensure_future(self._second_opinion(intended, woke, error, start, ended))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def finish(
        self, intended: float, answer: Any, woke: float | None = None, *, ended: float | None = None
    ) -> None:
        """As :meth:`_finish`, one at a time (the engine's thread and the event loop's)."""
        with self._finishing:
            self._finish(intended, answer, woke, ended)

    def _finish(
        self, intended: float, answer: Any, woke: float | None, ended: float | None
    ) -> None:
        """Judges one request's ``answer`` (a decoded result, or the exception it ended
        with; answer_verdict.py) and records it: latency from ``woke`` (when the sending
        thread took the request up, ``intended`` when not given) to the answer's last
        byte, or to now for a failure. Both send paths end here, the event loop's and the engine's.

        Why not from ``intended``: a thread the OS wakes late would put the client's own
        scheduling into the server's tail; perf_analyzer, too, times from when it sends. What the
        server causes still counts: the schedule never moves, a request that waits for a
        connection or a slot waits on its clock, and the timeout runs from ``intended``.
        ``ended``: when a failure happened, if earlier than now (a second opinion came
        after it)."""
        plan = self.plan
        verdict = judge_answer(answer, self._outputs, plan.protocol, plan.timeout)
        outcome, text = verdict.outcome, verdict.text
        failure = None if verdict.error is None else self.failure_of(verdict.error, outcome, text)
        if self._requests is not None:
            self._requests.finished(intended, ok=outcome == Outcome.SUCCESS)
        now = self.account(outcome, failure)
        origin = intended if woke is None else max(intended, woke)
        finished = verdict.received
        if finished is None:
            finished = now if ended is None else ended
        latency = recorded_latency(outcome, finished - origin, plan.timeout)
        self._stats.record(
            CanaryResult(
                plan.target,
                plan.model,
                plan.protocol,
                self._clock(),
                outcome,
                latency,
                text,
                send_lateness_seconds=origin - intended,
            )
        )

    def failure_of(self, error: BaseException, outcome: Outcome, text: str) -> Failure | None:
        """The failure log's entry for ``error``; None for a refused connection, which
        the readiness probe and the breaker already report."""
        if is_refused_connection(error) or outcome == Outcome.CLIENT_ERROR:
            return None  # (a client_error has its own line: canary_client_error)
        status = http_status(error) if self.plan.protocol in ("http", "openai") else None
        return Failure(outcome, text, status)

    def account(self, outcome: Outcome, failure: Failure | None) -> float:
        """The bookkeeping every finished request shares, whatever it measured: the
        failure log and the breaker. Returns now (the event loop's clock, and the
        engine's)."""
        if failure is not None:
            self._failure_log.failed(failure)
        self._failure_log.tick()
        now = time.monotonic()
        self._gates.record(outcome, "" if failure is None else failure.error, now)
        return now

    # --- what the engine asks (probe/canary/engine.py: EngineCanary) ------------------

    @property
    def request_timeout(self) -> float:
        """How long one request may take before it is a timeout (a stream: the whole stream)."""
        return self.plan.timeout

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker holds the load back to one probe a period."""
        return self._gates.breaker.is_open

    def silence_allowed(self) -> float:
        """How long it may go without an outcome before it reads as stalled: three of
        its intervals (fifteen on a Poisson schedule; a breaker's probe period while the
        breaker is open) and one request's timeout."""
        if self._gates.refusals.refusing:  # one request a minute until the model takes one
            return STALL_INTERVALS * REFUSED_PROBE_SECONDS + self.request_timeout
        if self.breaker_open:  # its probes go on a fixed period
            return STALL_INTERVALS * breaker.BREAKER_PROBE_SECONDS + self.request_timeout
        intervals = POISSON_STALL_INTERVALS if self.plan.poisson else STALL_INTERVALS
        sequence = None if self._requests is None else self._requests.sequence
        longest = 1.0 / self.plan.rate if sequence is None else sequence.end_gap
        return intervals * longest + self.request_timeout

    def next_gap(self) -> float:
        return self._gap()

    def may_send(self, intended: float) -> bool:
        """Whether to send at ``intended`` (a sequence plans that send when it may): on
        the sending thread, which applies first what other threads recorded."""
        allowed = self._gates.allows(intended)
        if allowed and self._requests is not None:
            self._requests.planned(intended)
        return allowed

    def answered(self, intended: float, answer: RawAnswer | BaseException, woke: float) -> None:
        """The engine's answer: decoded here as the HTTP and gRPC clients decode their
        own. One our reader refused gets a second opinion on the event loop
        (:meth:`_second_opinion`) instead of being recorded here; an answer that reads
        but lacks an output the metadata lists is the server's (:meth:`finish` checks)."""
        start = b""
        if not isinstance(answer, BaseException):
            raw = answer
            try:
                if isinstance(answer, GrpcAnswer):
                    answer = grpc_infer_answer(answer.reply, answer.received)
                elif isinstance(answer, tuple):  # (a StreamAnswer: the streaming canary's)
                    answer = http_infer_answer(*answer, self._answers.decode)
            except Exception as error:  # a status or a body that says it failed
                answer = error
                start = answer_body(raw)
        loop = self._loop
        if (
            isinstance(answer, BaseException)
            and loop is not None
            and self._fallback.should_ask(answer)
        ):
            start = start or error_start(answer)
            loop.call_soon_threadsafe(
                self._ask_library, intended, woke, answer, start, time.monotonic()
            )
            return
        self.finish(intended, answer, woke)

    async def _infer(self, timeout: float, intended: float) -> Any:
        plan = self.plan
        if self._fallback.active:
            return await self._fallback.infer(timeout)
        if self._requests is not None:
            return await self._requests.infer(
                self._client, intended, binary=self._binary, timeout=timeout
            )
        return await self._client.infer(
            plan.model, plan.version, self._tensors, binary=self._binary, timeout=timeout
        )


async def run_canaries(canaries: Sequence[ModelCanary]) -> None:
    """Runs every canary concurrently until cancelled; one failing never stops the others."""
    async with asyncio.TaskGroup() as group:
        for canary in canaries:
            group.create_task(_guarded(canary))


async def _guarded(canary: ModelCanary) -> None:
    try:
        await canary.run()
    except asyncio.CancelledError:
        raise
    except Exception:  # log it and let the other canaries run
        _log.exception("canary_crashed", target=canary.plan.target, model=canary.plan.model)
