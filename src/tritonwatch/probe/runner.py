"""Owns the canary's event loop thread, its clients, and the canary tasks.

The daemon is threaded (APScheduler, the exporter); the canary is asyncio, because
hundreds of concurrent in-flight requests are cheap as coroutines and expensive as
threads. This class is the bridge: one loop in one thread, one task per canary,
stopped within a bounded time.

Each canary chooses its sender once, when it is prepared (probe/canary/model_canary.py):
a generative model streams (probe/stream/stream_canary.py) at once when
``canary.stream.mode`` is ``on`` or the protocol is ``openai``, or when its config says
``decoupled`` (``canary_stream_detected``; with ``mode: off`` it is skipped with a
reason instead of failing every request). The runner gives every canary the factory of
streaming senders, and declares a series on the stream board when one is made.

A reload (or a model discovered, unloaded, reloaded) changes only what changed: a
canary whose plan and revision are the same keeps running — the same object, its
request prepared once, its schedule and breaker as they were, no gap in its series —
while removed ones stop, new ones start and changed ones restart.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.common.logs import get_logger
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.model_canary import (
    ModelCanary,
    Sender,
    run_canaries,
    streams_at_once,
)
from tritonwatch.probe.canary.model_info import ModelInfo
from tritonwatch.probe.canary.pauses import Pauses
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.unary import Bookkeeper
from tritonwatch.probe.stream.stream_canary import stream_senders
from tritonwatch.state.canary_board import CanaryBoard, SeriesKey
from tritonwatch.state.canary_liveness import stalled_canaries
from tritonwatch.state.stream_board import StreamBoard

_log = get_logger("canary")
STOP_TIMEOUT_SECONDS = 2.0
APPLY_TIMEOUT_SECONDS = 2 * STOP_TIMEOUT_SECONDS
"""How long :meth:`CanaryRunner.apply` waits for its reconcile (read at each call)."""


class ApplyTimeoutError(TimeoutError):
    """An apply's reconcile did not finish in time. It was not cancelled: it still runs,
    and lands in its turn, before any reconcile applied after it."""


ClientKey = tuple[str, str, str, ClientTLS | None, str | None]
Revisions = Mapping[tuple[str, str], str]
"""(target, model) → what the model was loaded as (model discovery's signature)."""


def _client_key(plan: CanaryPlan) -> ClientKey:
    """Models of one target share a client per protocol; a reload that moves the
    target's URLs (a gRPC client's HTTP API too) or TLS settings gets a new client
    instead of the stale one."""
    url = plan.grpc_url if plan.protocol == "grpc" else plan.http_url
    api = None if plan.grpc_only else plan.http_url
    return (plan.target, plan.protocol, url, plan.tls, api)


@dataclass(frozen=True, slots=True)
class _Running:
    canary: ModelCanary
    revision: str
    task: asyncio.Task[None]


class CanaryRunner:
    """Runs the canaries of a set of :class:`CanaryPlan` s in a background event loop."""

    def __init__(self, board: CanaryBoard, stream_board: StreamBoard | None = None) -> None:
        self.board = board
        """The canary board every canary records to (its series declared at each apply)."""
        self.stream_board = stream_board if stream_board is not None else StreamBoard()
        self._streaming: set[SeriesKey] = set()
        """Series with a streaming canary (declared in :attr:`stream_board`)."""
        self._stream_senders = stream_senders(board, self.stream_board)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="canary", daemon=True)
        self._engine = CanaryEngine()
        """Every canary sends from its thread (probe/canary/engine.py); this loop
        prepares them and runs the library path (probe/canary/library_path.py)."""
        self._running: dict[SeriesKey, _Running] = {}
        self._clients: dict[ClientKey, InferenceClient] = {}
        self._pauses = Pauses()
        """The paused models: :meth:`set_paused` writes, every canary made here reads.
        Kept by model, not on a canary: a restarted or handed-over canary has nothing
        to copy, so no pause or resume falls between two canary objects."""
        self._turn = asyncio.Lock()
        """Who owns what: the loop owns ``_running``, ``_clients`` and ``_streaming``, and
        one reconcile (or the stop's cancel) changes them at a time, in the order they
        were asked for, holding this lock across its awaits: a reconcile that an apply
        gave up waiting for can never interleave with the next one."""

    def start(self, plans: Sequence[CanaryPlan], revisions: Revisions | None = None) -> None:
        self._thread.start()
        self.apply(plans, revisions)

    def apply(self, plans: Sequence[CanaryPlan], revisions: Revisions | None = None) -> None:
        """Brings the canaries to ``plans``: one whose plan and revision (``revisions``,
        by target and model; none: "") are unchanged runs on untouched, a changed or
        skipped one restarts, a removed one stops, a new one starts. Statistics of kept
        models stay; those of removed ones go.

        Reconciles run one at a time in the order applied, whoever applies.

        Raises:
            ApplyTimeoutError: the reconcile took longer than :data:`APPLY_TIMEOUT_SECONDS`;
                it goes on and lands in its turn (an apply after this one lands after it).
        """
        wanted = {
            plan.key: (plan, (revisions or {}).get((plan.target, plan.model), "")) for plan in plans
        }
        timeout = APPLY_TIMEOUT_SECONDS
        # Declared at once, in apply order (= reconcile order): readiness and the board
        # know the canaries even while a slow reconcile has not landed yet.
        self.board.declare(wanted)
        asked = sum(plan.asked_rate or plan.rate for plan in plans)
        self.board.set_rates(asked, sum(plan.rate for plan in plans))
        done = asyncio.run_coroutine_threadsafe(self._reconcile_in_turn(wanted), self._loop)
        try:
            done.result(timeout=timeout)
        except TimeoutError:
            if done.done():
                raise  # the reconcile's own error, not the wait's
            raise ApplyTimeoutError(
                f"the canaries' reconcile did not finish in {timeout:g} s; it lands later"
            ) from None

    async def _reconcile_in_turn(self, wanted: Mapping[SeriesKey, tuple[CanaryPlan, str]]) -> None:
        """Reconciles to ``wanted`` in its turn (see ``_turn``)."""
        async with self._turn:
            await self._reconcile(wanted)

    async def _cancel_all_in_turn(self) -> None:
        async with self._turn:
            await self._cancel_all()

    def stalled(self, now: float) -> dict[SeriesKey, bool]:
        """Every running canary's liveness verdict at monotonic ``now`` (True: stalled)."""
        return stalled_canaries(self.running(), self.board.snapshot(now, quantiles=False), now)

    @property
    def engine_restarts(self) -> int:
        """How many times the engine's loop crashed and ran again."""
        return self._engine.restarts

    def engine_recovering(self) -> bool:
        """Whether the engine crashed within its settling time (``/health`` degraded)."""
        return self._engine.recovering()

    def running(self) -> dict[SeriesKey, ModelCanary]:
        """The canaries now running, by series key."""
        return {key: running.canary for key, running in tuple(self._running.items())}

    async def _reconcile(self, wanted: Mapping[SeriesKey, tuple[CanaryPlan, str]]) -> None:
        # A canary that ended (skipped: its model could not be filled) tries again, as
        # a reload always made it: a sample file may have been fixed in place.
        changed = [
            key
            for key, running in self._running.items()
            if running.task.done() or wanted.get(key) != (running.canary.plan, running.revision)
        ]
        stopped = [self._running.pop(key) for key in changed]
        await _stop(stopped)
        # Here, on the loop, where hand-overs add their keys too: one thread changes the set.
        self._declare_streams(
            {key for key in self._streaming if key in wanted}
            | {key for key, (plan, _) in wanted.items() if streams_at_once(plan)}
        )
        for key, (plan, revision) in wanted.items():
            if key in self._running:
                continue
            canary = self._canary(plan)  # (paused while a sweep of its model runs: _pauses)
            task = asyncio.create_task(run_canaries([canary]), name=f"canary:{key}")
            self._running[key] = _Running(canary, revision, task)
        used = {_client_key(running.canary.plan) for running in self._running.values()}
        await self._close_clients([key for key in self._clients if key not in used])

    def _canary(self, plan: CanaryPlan) -> ModelCanary:
        client, engine, pauses = self._client(plan), self._engine, self._pauses
        streams = self._stream_sender
        return ModelCanary(plan, client, self.board, engine=engine, streams=streams, pauses=pauses)

    async def _stream_sender(
        self,
        plan: CanaryPlan,
        client: InferenceClient,
        books: Bookkeeper,
        model: ModelInfo | None,
        seed: int,
    ) -> Sender:
        """A canary's streaming sender; its series declared on the stream board (here,
        on the loop, where every change to ``_streaming`` is made)."""
        sender = await self._stream_senders(plan, client, books, model, seed)
        self._declare_streams(self._streaming | {plan.key})
        return sender

    def _declare_streams(self, keys: set[SeriesKey]) -> None:
        self._streaming = keys
        self.stream_board.declare(keys)

    def _client(self, plan: CanaryPlan) -> InferenceClient:
        """The target's client for the plan's protocol, made on first use."""
        key = _client_key(plan)
        if key not in self._clients:
            self._clients[key] = client_for(
                plan.protocol, plan.http_url, plan.grpc_url, plan.tls, grpc_only=plan.grpc_only
            )
        return self._clients[key]

    async def _close_clients(self, keys: Iterable[ClientKey]) -> None:
        for key in list(keys):
            client = self._clients.pop(key)
            try:
                async with asyncio.timeout(STOP_TIMEOUT_SECONDS / 2):
                    await client.close()
            except Exception as error:  # closing must never block shutdown
                _log.debug("canary_client_close_failed", error=str(error))

    async def _cancel_all(self) -> None:
        running, self._running = list(self._running.values()), {}
        await _stop(running)
        await self._close_clients(list(self._clients))

    def set_paused(self, target: str, model: str, paused: bool) -> None:
        """Pauses one model's canaries (a sweep of that model is running), those running
        now and any made meanwhile (a reload's restart, a hand-over to streaming). A
        resumed one owes outcomes from the resume on: its silence while paused is no
        stall (canary_liveness.py counts from ``sending_since``, moved there)."""
        self._pauses.set(target, model, paused, time.monotonic())  # (the canaries' clock)

    def _run_loop(self) -> None:
        self._loop.run_forever()

    def stop(self) -> None:
        self._engine.stop(STOP_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            if not self._loop.is_closed() and not self._loop.is_running():
                self._loop.close()
            return
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_all_in_turn(), self._loop).result(
                STOP_TIMEOUT_SECONDS
            )
        except (TimeoutError, Exception) as error:  # bounded shutdown: give up, log, go on
            _log.warning("canary_stop_incomplete", error=str(error))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=STOP_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self._loop.close()


async def _stop(running: Sequence[_Running]) -> None:
    """Cancels the canaries' tasks and waits (bounded) for each to unwind, so none is
    left pending on the loop."""
    for each in running:
        each.task.cancel()
    if running:
        await asyncio.wait([each.task for each in running], timeout=STOP_TIMEOUT_SECONDS / 2)
