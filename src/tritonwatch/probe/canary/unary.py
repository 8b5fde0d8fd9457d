"""A plain model's canary requests: one infer per send, HTTP or gRPC, and how each ends.

:class:`UnarySender` is what a :class:`~tritonwatch.probe.canary.model_canary.ModelCanary`
sends for a model that answers each request once. It is made once, when the canary is
prepared from the model's metadata and config (:meth:`UnarySender.prepare`): the request's
tensors, or its requests made per send (a stateful model's sequences, a cached model's
unique bytes, ``canary.input_data`` samples: probe/canary/request_source.py), in binary or
JSON tensors as the server reads them. The engine sends them; the library path
(probe/canary/library_path.py) sends what the engine cannot, and gives the second opinion
on an answer our readers refused.

Threads: prepared on the runner's event loop; :meth:`UnarySender.record` runs on the
thread that read the answer (the engine's, or the loop's for the library path and a
second opinion), one at a time (``_recording``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tritonwatch.common.logs import get_logger
from tritonwatch.kserve.infer_response import HttpAnswerDecoder
from tritonwatch.kserve.payload import Tensor, input_specs
from tritonwatch.probe.canary.answer_verdict import judge_answer, recorded_latency
from tritonwatch.probe.canary.clients import (
    BINARY_TENSOR_EXTENSION,
    classify_error,
    error_text,
    grpc_infer_answer,
    http_infer_answer,
)
from tritonwatch.probe.canary.engine_channels import Endpoint, EngineRequest
from tritonwatch.probe.canary.engine_wires import GrpcAnswer, answer_body
from tritonwatch.probe.canary.failures import Failure
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.library_path import LibraryCall, LibraryPath, error_start
from tritonwatch.probe.canary.plans import CanaryPlan, source_tensors
from tritonwatch.probe.canary.request_source import CanaryRequests, varying_requests
from tritonwatch.probe.canary.sequence import SequencePlanner, control_inputs
from tritonwatch.records.observations import CanaryResult, Outcome
from tritonwatch.state.canary_board import CanaryBoard

_log = get_logger("canary")


class Bookkeeper(Protocol):
    """What a sender asks of its canary when a request ends (model_canary.py)."""

    def failure_of(self, error: BaseException, outcome: Outcome, text: str) -> Failure | None:
        """The failure log's entry for ``error`` (None: not logged on its own)."""
        ...

    def tally(self, outcome: Outcome, failure: Failure | None) -> float:
        """The failure log and the send gates take the outcome; returns now."""
        ...


class UnarySender:
    """One plain model's requests, as the engine and the library path send them, and the
    record of each one's end (:meth:`record`)."""

    def __init__(
        self,
        plan: CanaryPlan,
        client: InferenceClient,
        stats: CanaryBoard,
        books: Bookkeeper,
        *,
        tensors: list[Tensor],
        requests: CanaryRequests | None,
        outputs: list[str],
        binary: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._plan = plan
        self._client = client
        self._stats = stats
        self._books = books
        self._clock = clock
        self._tensors = tensors  # read-only
        self._requests = requests
        """Requests made per send; None: ``_tensors`` every time. The sending thread plans
        each send (:meth:`planned`), :meth:`record` ends it."""
        self._outputs = outputs  # read-only: what the metadata lists
        self._binary = binary  # read-only: binary tensors (Triton's extension) or JSON
        self._answers = HttpAnswerDecoder(plan.limits)
        """Reads the engine's HTTP answers (the engine's thread), remembering the last
        good one's layout."""
        self.library = LibraryPath(
            {"target": plan.target, "model": plan.model, "protocol": plan.protocol},
            self._library_call,
            clock=clock,
        )
        """Second opinions and the library path: the loop's (the engine's thread only
        asks ``should_ask``)."""
        self.left_engine = asyncio.Event()  # the loop's
        """Set when the library read what we could not: the canary leaves the engine."""
        self._loop: asyncio.AbstractEventLoop | None = None  # set on the loop in prepare
        self._pending: set[asyncio.Task[None]] = set()  # the loop's: second opinions
        self._recording = threading.Lock()
        """:meth:`record` runs on the sending thread and, for a second opinion, on the
        loop's: one at a time (the failure log and ``_requests.finished`` too)."""

    @classmethod
    async def prepare(
        cls,
        plan: CanaryPlan,
        client: InferenceClient,
        stats: CanaryBoard,
        books: Bookkeeper,
        model: tuple[dict[str, Any], dict[str, Any] | None],
        *,
        poisson: random.Random | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> UnarySender:
        """The sender for the model's ``(metadata, config)``: its tensors (control inputs
        left to Triton), its requests made per send when the model needs them, and the
        tensor format the server reads. ``poisson``: the Poisson schedule's generator.

        Raises:
            PayloadError: the model's request cannot be built.
        """
        metadata, config = model
        controls = control_inputs(config)  # Triton fills them: never sent
        specs = [s for s in input_specs(plan.model, metadata, config) if s.name not in controls]
        tensors = source_tensors(plan, specs)
        first, requests = varying_requests(plan, config, specs, tensors, poisson=poisson)
        outputs = [str(o["name"]) for o in metadata.get("outputs", [])]
        binary = await binary_tensors(plan, client)
        sender = cls(
            plan,
            client,
            stats,
            books,
            tensors=list(first),
            requests=requests,
            outputs=outputs,
            binary=binary,
            clock=clock,
        )
        sender._loop = asyncio.get_running_loop()
        return sender

    @property
    def tensor_format(self) -> str:
        """``binary`` or ``json`` (HTTP); ``grpc`` for the gRPC canary, which has one form."""
        if self._plan.protocol != "http":
            return "grpc"
        return "binary" if self._binary else "json"

    @property
    def timeout(self) -> float:
        return self._plan.timeout

    @property
    def sequence(self) -> SequencePlanner | None:
        """A stateful model's sequence plan (its gaps), else None."""
        return None if self._requests is None else self._requests.sequence

    def engine_request(self) -> tuple[EngineRequest, Endpoint] | None:
        """The request as the engine sends it, and where; None when the engine cannot
        (a gRPC message over its window: the library path sends it)."""
        client, plan = self._client, self._plan
        request: EngineRequest | None
        if self._requests is not None:
            request = self._requests.engine_requests(client, binary=self._binary)
        else:
            encoded = client.infer_request(
                plan.model, plan.version, self._tensors, binary=self._binary
            )
            request = client.wire_request(encoded, timeout=plan.timeout, limits=plan.limits)
        return None if request is None else (request, client.engine_endpoint)

    def _library_call(self) -> LibraryCall:
        """The library call of this canary's request (probe/canary/library_path.py)."""
        client, plan = self._client, self._plan
        if self._requests is not None:
            return self._requests.library_call(client, binary=self._binary)
        encoded = client.infer_request(plan.model, plan.version, self._tensors, binary=self._binary)
        return client.library_call(encoded, plan.limits)

    def planned(self, intended: float) -> None:
        """The send at ``intended`` is allowed (a sequence fixes its flags now)."""
        if self._requests is not None:
            self._requests.planned(intended)

    def cancel(self) -> None:
        """Cancels the second opinions still asked (the canary stops)."""
        for task in list(self._pending):
            task.cancel()

    def record(self, intended: float, answer: Any, woke: float | None = None) -> None:
        """Judges and records the end of the request sent at ``intended`` (taken up by
        the sending thread at ``woke``), on whichever thread read it: the engine's raw
        answer (decoded here), the library's decoded one, or the exception it failed
        with. An answer our reader refused gets a second opinion on the event loop
        instead, which records it."""
        start = b""
        if isinstance(answer, GrpcAnswer | tuple):  # the engine's (HTTP: a tuple)
            raw = answer
            try:
                if isinstance(answer, GrpcAnswer):
                    answer = grpc_infer_answer(answer.reply, answer.received)
                else:
                    status, headers, body, received = answer
                    answer = http_infer_answer(
                        status, headers, body, received, self._answers.decode
                    )
            except Exception as error:  # a status or a body that says it failed
                answer = error
                start = answer_body(raw)
        loop = self._loop
        if (
            isinstance(answer, BaseException)
            and loop is not None
            and self.library.should_ask(answer)
        ):
            start = start or error_start(answer)
            loop.call_soon_threadsafe(
                self._ask_library, intended, woke or intended, answer, start, time.monotonic()
            )
            return
        self._record(intended, answer, woke, None)

    def _ask_library(
        self, intended: float, woke: float, error: BaseException, start: bytes, ended: float
    ) -> None:
        """On the event loop: a second opinion for an answer our reader refused."""
        task = asyncio.ensure_future(self._second_opinion(intended, woke, error, start, ended))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _second_opinion(
        self, intended: float, woke: float, error: BaseException, start: bytes, ended: float
    ) -> None:
        """Records the request whose answer our reader refused with ``error``: a
        ``client_error`` when the library reads the same request's answer (the canary
        then leaves the engine), else ``error`` as the server's, timed to ``ended``."""
        verdict = await self.library.second_opinion(error, start, self._outputs, self.timeout)
        if self.library.active:
            self.left_engine.set()
        self._record(intended, verdict, woke, ended)

    def _record(
        self, intended: float, answer: Any, woke: float | None, ended: float | None
    ) -> None:
        """Judges one request's decoded ``answer`` (or the exception it ended with;
        answer_verdict.py) and records it: latency from ``woke`` (when the sending
        thread took the request up, ``intended`` when not given) to the answer's last
        byte, or to now for a failure (``ended``: when the failure happened, if earlier:
        a second opinion came after it).

        Why not from ``intended``: a thread the OS wakes late would put the client's own
        scheduling into the server's tail; perf_analyzer, too, times from when it sends.
        What the server causes still counts: the schedule never moves, a request that
        waits for a connection or a slot waits on its clock, and the timeout runs from
        ``intended``."""
        plan = self._plan
        verdict = judge_answer(answer, self._outputs, plan.protocol, plan.timeout)
        outcome, text = verdict.outcome, verdict.text
        with self._recording:
            failure = None
            if verdict.error is not None:
                failure = self._books.failure_of(verdict.error, outcome, text)
            if self._requests is not None:
                self._requests.finished(intended, ok=outcome == Outcome.SUCCESS)
            now = self._books.tally(outcome, failure)
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


async def binary_tensors(plan: CanaryPlan, client: InferenceClient) -> bool:
    """HTTP: binary tensors when the server's own metadata (``GET /v2``) lists the
    ``binary_tensor_data`` extension, JSON tensors otherwise (gRPC: False, one form).

    Asked, not guessed from errors: Seldon MLServer answers a binary body with 500,
    which no status rule tells from a broken model. Without ``/v2`` (a proxy that
    blocks it, a broken server) JSON is the fallback, with a
    ``canary_server_metadata_unavailable`` line: the one form the KServe v2 protocol has
    every server read.
    """
    if plan.protocol != "http":
        return False
    try:
        async with asyncio.timeout(plan.timeout):
            extensions = await client.extensions()
    except asyncio.CancelledError:
        raise
    except Exception as error:  # any failure: fall back, never stop the canary
        _log.warning(
            "canary_server_metadata_unavailable",
            target=plan.target,
            model=plan.model,
            outcome=str(classify_error(error, plan.protocol)),
            error=error_text(error, timeout=plan.timeout),
            tensors="json",
        )
        return False
    return BINARY_TENSOR_EXTENSION in extensions
