"""The canary: a small, steady, open-loop load on every model, measured end to end.

Open loop: requests leave on schedule whether or not earlier ones returned, and
latency counts from the *intended* send time. When a server stalls, the requests
scheduled meanwhile wait for an in-flight slot with their clocks running, and time
out at ``intended + timeout``; the stall shows in the tail instead of being hidden
(coordinated omission).

A :class:`ModelCanary` is composed: its schedule, its send gates (pause, breaker,
refusal watch: send_gates.py), its failure log, and a sender chosen once, when it is
prepared from the model's metadata and config: :class:`~tritonwatch.probe.canary.unary.UnarySender`
(HTTP or gRPC, plain, stateful, cached or sampled requests), or a streaming sender for a
decoupled model or an OpenAI server (made by the ``streams`` factory the runner gives,
probe/stream/stream_canary.py). The engine (probe/canary/engine.py) sends every sender's
requests; the library path (probe/canary/library_path.py) sends a plain request the
engine cannot, and every request once the library read an answer our readers could not.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from tritonwatch.common.logs import get_logger
from tritonwatch.kserve.payload import PayloadError
from tritonwatch.probe.canary import breaker, library_path
from tritonwatch.probe.canary.clients import http_status, is_refused_connection
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.engine_channels import Endpoint, EngineRequest
from tritonwatch.probe.canary.failures import Failure, FailureLog
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.library_path import LibraryPath
from tritonwatch.probe.canary.model_info import (
    ModelInfo,
    fetch_model_info,
    is_decoupled,
    report_skipped,
)
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.refusals import REFUSED_PROBE_SECONDS
from tritonwatch.probe.canary.send_gates import SendGates
from tritonwatch.probe.canary.sequence import SequencePlanner
from tritonwatch.probe.canary.unary import Bookkeeper, UnarySender
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard

_log = get_logger("canary")
STALL_INTERVALS = 3
"""Intervals without an outcome, plus one timeout, after which a canary is stalled."""
POISSON_STALL_INTERVALS = 15
"""The same for a Poisson schedule, whose gaps are random: one gap in e³ is over three
mean intervals, one in e¹⁵ over fifteen."""
STREAMING_OFF = "decoupled model; streaming is off"
NO_STREAMING = "decoupled model; no streaming canary here"


class StreamingUnavailableError(Exception):
    """A model that streams, for a canary that may not stream (its reason, as is)."""


class Sender(Protocol):
    """What a canary sends, chosen once from the model's metadata and config."""

    @property
    def tensor_format(self) -> str:
        """How requests are encoded: ``binary``, ``json``, ``grpc`` or ``stream``."""
        ...

    @property
    def timeout(self) -> float:
        """How long one request may take before it is a timeout (a stream: all of it)."""
        ...

    @property
    def sequence(self) -> SequencePlanner | None:
        """A stateful model's sequence plan (the schedule's gaps), else None."""
        ...

    @property
    def library(self) -> LibraryPath | None:
        """Its library path; None: the engine sends every request (a stream)."""
        ...

    @property
    def left_engine(self) -> asyncio.Event:
        """Set when its requests must leave the engine for the library path."""
        ...

    def engine_request(self) -> tuple[EngineRequest, Endpoint] | None:
        """Its requests as the engine sends them, and where; None: the engine cannot."""
        ...

    def planned(self, intended: float) -> None:
        """The send at ``intended`` is allowed (on the sending thread)."""
        ...

    def record(self, intended: float, answer: Any, woke: float | None = None) -> None:
        """Records how the request sent at ``intended`` ended, on the thread that read it."""
        ...

    def cancel(self) -> None:
        """Lets go of what it still has running on the loop (the canary stops)."""
        ...


StreamSenders = Callable[
    [CanaryPlan, InferenceClient, Bookkeeper, ModelInfo | None, int], Awaitable[Sender]
]
"""Makes a streaming sender for (plan, client, bookkeeper, the model's metadata and
config, None for an OpenAI server, a seed); raises ``PayloadError`` when the model
cannot be streamed from."""


class ModelCanary:
    """Fires one model's canary until cancelled; results go to ``stats``.

    Threads: the runner's event loop prepares it and runs its library path; the
    sending thread (the engine's, or the loop's on the library path) asks
    :meth:`next_gap` and :meth:`may_send`; :meth:`record` takes each request's end on
    whichever thread read it. Beside each attribute: who writes it (liveness reads)."""

    def __init__(
        self,
        plan: CanaryPlan,
        client: InferenceClient,
        stats: CanaryBoard,
        *,
        engine: CanaryEngine,
        streams: StreamSenders | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        pauses: Pauses | None = None,
    ) -> None:
        """``streams``: makes the sender of a model that streams (None: such a model's
        canary is skipped)."""
        self.plan = plan
        self._engine = engine
        self._client = client
        self._stats = stats
        self._streams = streams
        self._random = random.Random(seed)  # noqa: S311 - the sending thread's (gaps, jitter)
        self._clock = clock
        self._failure_log = FailureLog(plan.target, plan.model, plan.protocol, clock=clock)
        self._gates = SendGates(plan, stats, pauses)
        """The pause, breaker and refusal watch: the sending thread's (send_gates.py)."""
        self.sender: Sender | None = None  # the loop's, once, in run
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

    async def prepare(self) -> Sender | None:
        """The canary's sender, made from the model's metadata and config (retried with
        backoff while the server is unreachable; none asked of an OpenAI server). None
        when the model cannot be sent to, after one ``canary_skipped`` log
        line, with the reason kept in the statistics (the ``tritonwatch_canary_skipped``
        metric, the status page)."""
        plan = self.plan
        model = None
        try:
            if plan.protocol != "openai":  # (an OpenAI server has no KServe model APIs)
                model = await fetch_model_info(self._client, plan, self._stats)
            if model is None or plan.stream.mode == "on" or is_decoupled(model[1]):
                sender = await self._streaming(model)
            else:
                poisson = self._random if plan.poisson else None
                sender = await UnarySender.prepare(
                    plan, self._client, self._stats, self, model, poisson=poisson, clock=self._clock
                )
        except PayloadError as error:
            report_skipped(plan, self._stats, error, self._clock())
            return None
        except StreamingUnavailableError as error:
            self._stats.set_skipped(plan.key, str(error), self._clock())
            return None
        self._stats.set_skipped(plan.key, None)
        return sender

    async def _streaming(self, model: ModelInfo | None) -> Sender:
        """The streaming sender (a decoupled model answers a plain infer with an error:
        Triton's HTTP endpoint refuses it outright, so the plain canary never sends to
        one)."""
        plan = self.plan
        if plan.stream.mode == "off" or self._streams is None:
            reason = STREAMING_OFF if plan.stream.mode == "off" else NO_STREAMING
            _log.info("canary_skipped", target=plan.target, model=plan.model, reason=reason)
            raise StreamingUnavailableError(reason)
        if model is not None:
            _log.info(
                "canary_stream_detected",
                target=plan.target,
                model=plan.model,
                protocol=plan.protocol,
            )
        return await self._streams(plan, self._client, self, model, self._random.getrandbits(32))

    def _gap(self) -> float:
        """The gap after the next send (a sequence's plan, probe/canary/sequence.py)."""
        sequence = None if self.sender is None else self.sender.sequence
        if sequence is not None:
            return sequence.gap()
        mean = 1.0 / self.plan.rate
        return self._random.expovariate(self.plan.rate) if self.plan.poisson else mean

    async def run(self) -> None:
        """Prepares, then sends on schedule until cancelled: from the engine, or through
        the library path when the engine cannot send its request or the library read
        what our readers could not."""
        sender = self.sender = await self.prepare()
        if sender is None:
            return
        plan = self.plan
        _log.info(
            "canary_started",
            target=plan.target,
            model=plan.model,
            rate=plan.rate,
            protocol=plan.protocol,
            tensors=sender.tensor_format,
        )
        loop = asyncio.get_running_loop()
        self._began = self._clock()
        first_send = loop.time() + self._random.uniform(0, 1.0 / plan.rate)
        try:
            found = sender.engine_request()
            if found is not None:
                await self._serve_on_engine(sender, *found, first_send)
                first_send = loop.time()
            library = sender.library
            assert library is not None, "a sender without a library path never leaves the engine"
            library.active = True
            self._gates.take_over()  # the loop sends from here (the engine has let go)
            await library_path.serve(
                library, self, first_send, timeout=sender.timeout, max_in_flight=plan.max_in_flight
            )
        finally:
            sender.cancel()
            self._failure_log.flush()

    async def _serve_on_engine(
        self, sender: Sender, request: EngineRequest, endpoint: Endpoint, first_send: float
    ) -> None:
        """Sends ``request`` from the engine until this task is cancelled, or returns
        once ``sender`` leaves the engine (the library path then sends)."""
        host, port, tls = endpoint
        serving = asyncio.ensure_future(
            self._engine.serve(
                self,
                host,
                port,
                request,
                timeout=sender.timeout,
                max_in_flight=self.plan.max_in_flight,
                first_send=first_send,
                tls=tls,
            )
        )
        leaving = asyncio.ensure_future(sender.left_engine.wait())
        try:
            await asyncio.wait((serving, leaving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            serving.cancel()  # the engine lets the canary go (or already did)
            leaving.cancel()
            await asyncio.wait((serving, leaving))
            self._failure_log.flush()
        if not serving.cancelled():
            serving.result()  # how it ended, if not by leaving

    # --- what a sender asks when a request ends (unary.py: Bookkeeper) ---------------

    def failure_of(self, error: BaseException, outcome: Outcome, text: str) -> Failure | None:
        """The failure log's entry for ``error``; None for a refused connection, which
        the readiness probe and the breaker already report."""
        if is_refused_connection(error) or outcome == Outcome.CLIENT_ERROR:
            return None  # (a client_error has its own line: canary_client_error)
        status = http_status(error) if self.plan.protocol in ("http", "openai") else None
        return Failure(outcome, text, status)

    def tally(self, outcome: Outcome, failure: Failure | None) -> float:
        """The bookkeeping every finished request shares, whatever it measured: the
        failure log and the send gates. Returns now (the monotonic clock)."""
        if failure is not None:
            self._failure_log.failed(failure)
        self._failure_log.tick()
        now = time.monotonic()
        self._gates.record(outcome, "" if failure is None else failure.error, now)
        return now

    # --- what the engine and the library path ask (engine_wires.EngineCanary) --------

    @property
    def request_timeout(self) -> float:
        """How long one request may take before it is a timeout (a stream: the whole stream)."""
        return self.plan.timeout if self.sender is None else self.sender.timeout

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
        sequence = None if self.sender is None else self.sender.sequence
        longest = 1.0 / self.plan.rate if sequence is None else sequence.end_gap
        return intervals * longest + self.request_timeout

    def next_gap(self) -> float:
        return self._gap()

    def may_send(self, intended: float) -> bool:
        """Whether to send at ``intended`` (a sequence plans that send when it may): on
        the sending thread, which applies first what other threads recorded."""
        allowed = self._gates.allows(intended)
        if allowed and self.sender is not None:
            self.sender.planned(intended)
        return allowed

    def record(self, intended: float, answer: Any, woke: float | None = None) -> None:
        """How the request sent at ``intended`` (taken up at ``woke``) ended, as its
        sender records it, on the thread that read it."""
        assert self.sender is not None, "nothing is sent before the sender is made"
        self.sender.record(intended, answer, woke)


def streams_at_once(plan: CanaryPlan) -> bool:
    """Streamed from the start, without asking the model's config first."""
    return plan.stream.mode == "on" or plan.protocol == "openai"


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
