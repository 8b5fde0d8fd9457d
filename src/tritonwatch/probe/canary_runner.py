"""Owns the canary's event loop thread, its clients, and the canary tasks.

The daemon is threaded (APScheduler, the exporter); the canary is asyncio, because
hundreds of concurrent in-flight requests are cheap as coroutines and expensive as
threads. This class is the bridge: one loop in one thread, reconfigured whole on
config reload, stopped within a bounded time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from tritonwatch.client_tls import ClientTLS
from tritonwatch.logs import get_logger
from tritonwatch.probe import canary_timing
from tritonwatch.probe.canary import CanaryPlan, ModelCanary, run_canaries
from tritonwatch.probe.canary_stats import CanaryStats
from tritonwatch.probe.clients import InferenceClient, client_for

_log = get_logger("canary")
STOP_TIMEOUT_SECONDS = 2.0


ClientKey = tuple[str, str, str, ClientTLS | None]


def _client_key(plan: CanaryPlan) -> ClientKey:
    """Models of one target share a client per protocol; a reload that moves the
    target's URL or TLS settings gets a new client instead of the stale one."""
    url = plan.grpc_url if plan.protocol == "grpc" else plan.http_url
    return (plan.target, plan.protocol, url, plan.tls)


class CanaryRunner:
    """Runs the canaries of a set of :class:`CanaryPlan` s in a background event loop."""

    def __init__(self, stats: CanaryStats) -> None:
        self.stats = stats
        self._loop = canary_timing.new_event_loop()  # sub-millisecond timers
        self._thread = threading.Thread(target=self._loop.run_forever, name="canary", daemon=True)
        self._main: asyncio.Task[None] | None = None
        self._canaries: list[ModelCanary] = []
        self._clients: dict[ClientKey, InferenceClient] = {}

    def start(self, plans: Sequence[CanaryPlan]) -> None:
        self._thread.start()
        self.apply(plans)

    def apply(self, plans: Sequence[CanaryPlan]) -> None:
        """Replaces the running canaries with ``plans`` (statistics of kept models stay)."""
        self.stats.declare(plan.key for plan in plans)
        asyncio.run_coroutine_threadsafe(self._replace(list(plans)), self._loop).result(
            timeout=STOP_TIMEOUT_SECONDS * 2
        )

    async def _replace(self, plans: list[CanaryPlan]) -> None:
        await self._cancel_all()
        self._canaries = [ModelCanary(plan, self._client(plan), self.stats) for plan in plans]
        self._main = asyncio.create_task(run_canaries(self._canaries), name="canaries")

    def _client(self, plan: CanaryPlan) -> InferenceClient:
        """The target's client for the plan's protocol, made on first use."""
        key = _client_key(plan)
        if key not in self._clients:
            self._clients[key] = client_for(plan.protocol, plan.http_url, plan.grpc_url, plan.tls)
        return self._clients[key]

    async def _cancel_all(self) -> None:
        if self._main is not None:
            self._main.cancel()
            # Wait for every canary task to unwind, so none is left pending on the loop.
            await asyncio.wait([self._main], timeout=STOP_TIMEOUT_SECONDS / 2)
            self._main = None
        clients, self._clients = self._clients, {}
        for client in clients.values():
            try:
                async with asyncio.timeout(STOP_TIMEOUT_SECONDS / 2):
                    await client.close()
            except Exception as error:  # closing must never block shutdown
                _log.debug("canary_client_close_failed", error=str(error))

    def set_paused(self, target: str, model: str, paused: bool) -> None:
        """Pauses one model's canary (a sweep of that model is running)."""
        for canary in self._canaries:
            if (canary.plan.target, canary.plan.model) == (target, model):
                canary.paused = paused

    def stop(self) -> None:
        if not self._thread.is_alive():
            if not self._loop.is_closed() and not self._loop.is_running():
                self._loop.close()
            return
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(
                STOP_TIMEOUT_SECONDS
            )
        except (TimeoutError, Exception) as error:  # bounded shutdown: give up, log, go on
            _log.warning("canary_stop_incomplete", error=str(error))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=STOP_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self._loop.close()
