"""The simulator's owner: starts and stops every listener and the core, in one place.

``SimulatorService`` is the async owner (HTTP API + admin, metrics, gRPC, the core's
poller); the CLI runs it on the main thread until a signal. ``Simulator`` runs the same
service on a background thread with its own event loop, for tests and demos that need a
Triton-compatible server in process::

    with Simulator(scenario="healthy") as sim:
        client = tritonclient.http.InferenceServerClient(sim.http_url.removeprefix("http://"))
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

import grpc
from aiohttp import web

from tritonwatch.common import precise_loop
from tritonwatch.sim.builtin import builtin_model_set
from tritonwatch.sim.core import DEFAULT_METRICS_INTERVAL_S, SimCore
from tritonwatch.sim.faults import Fault, parse_fault
from tritonwatch.sim.grpc_api import build_grpc_server
from tritonwatch.sim.http_api import build_api_app, build_metrics_app
from tritonwatch.sim.models import ModelSet, load_model_set
from tritonwatch.sim.virtual_loop import VirtualTimeLoop

T = TypeVar("T")
Clock = Literal["real", "virtual"]
SHUTDOWN_GRACE_S = 0.25
START_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Endpoints:
    """Where the simulator listens (ports as bound, never 0)."""

    host: str
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def _host_for_url(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def http_url(self) -> str:
        """``http://HOST:PORT`` of the HTTP API."""
        return f"http://{self._host_for_url}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``HOST:PORT`` as ``tritonclient.grpc`` wants it."""
        return f"{self._host_for_url}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """``http://HOST:PORT/metrics``."""
        return f"http://{self._host_for_url}:{self.metrics_port}/metrics"

    def banner(self) -> str:
        """The one line the CLI prints so scripts can read the chosen ports."""
        host = self._host_for_url
        return (
            f"http={host}:{self.http_port} grpc={host}:{self.grpc_port} "
            f"metrics={host}:{self.metrics_port}"
        )


def resolve_model_set(models: ModelSet | str | Path | None) -> ModelSet:
    """A model set from an object, a YAML path, or None for the built-in set."""
    if models is None:
        return builtin_model_set()
    if isinstance(models, ModelSet):
        return models
    return load_model_set(models)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class GrpcTLS:
    """Triton's ``--grpc-use-ssl`` family: the server's certificate and key, and for
    ``--grpc-use-ssl-mutual`` the root certificate client certificates must chain to.
    (Triton's HTTP endpoint has no TLS of its own; deployments put a proxy in front.)"""

    server_cert: Path
    server_key: Path
    root_cert: Path | None = None
    mutual: bool = False

    def credentials(self) -> grpc.ServerCredentials:
        root = self.root_cert.read_bytes() if self.root_cert is not None else None
        return grpc.ssl_server_credentials(
            [(self.server_key.read_bytes(), self.server_cert.read_bytes())],
            root_certificates=root,
            require_client_auth=self.mutual,
        )


@dataclass(frozen=True)
class SimulatorOptions:
    """How a simulator runs, apart from its model set (see ``Simulator`` for each field)."""

    scenario: str = "healthy"
    seed: int = 0
    host: str = "127.0.0.1"
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    summary_latencies: bool = False
    metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S
    model_control_mode: str = "explicit"
    grpc_tls: GrpcTLS | None = None
    histogram_latencies: bool = False
    response_cache_bytes: int | None = None
    host_cpu_utilization: float | None = None


class SimulatorService:
    """Starts and stops the core and its three listeners on the running loop."""

    def __init__(self, model_set: ModelSet, options: SimulatorOptions) -> None:
        self._model_set = model_set
        self._options = options
        self._runners: list[web.AppRunner] = []
        self._grpc: grpc.aio.Server | None = None
        self.core: SimCore | None = None

    async def start(self) -> Endpoints:
        """Builds the core and binds every listener; stops what started on failure."""
        try:
            return await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> Endpoints:
        options = self._options
        core = self.core = SimCore(
            self._model_set,
            loop=asyncio.get_running_loop(),
            scenario=options.scenario,
            seed=options.seed,
            summary_latencies=options.summary_latencies,
            histogram_latencies=options.histogram_latencies,
            metrics_interval_s=options.metrics_interval_s,
            model_control_mode=options.model_control_mode,
            response_cache_bytes=options.response_cache_bytes,
            host_cpu_utilization=options.host_cpu_utilization,
        )
        core.start()
        bound_http = await self._serve(build_api_app(core), options.http_port)
        bound_metrics = await self._serve(build_metrics_app(core), options.metrics_port)
        self._grpc = build_grpc_server(core)
        host = f"[{options.host}]" if ":" in options.host else options.host
        address = f"{host}:{options.grpc_port}"
        bound_grpc = (
            self._grpc.add_secure_port(address, options.grpc_tls.credentials())
            if options.grpc_tls is not None
            else self._grpc.add_insecure_port(address)
        )
        if bound_grpc == 0:
            raise OSError(f"cannot bind gRPC to {host}:{options.grpc_port}")
        await self._grpc.start()
        return Endpoints(options.host, bound_http, bound_grpc, bound_metrics)

    async def _serve(self, app: web.Application, port: int) -> int:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
        await runner.setup()
        self._runners.append(runner)
        sock = _listen(self._options.host, port)
        try:
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            raise
        bound: int = sock.getsockname()[1]
        return bound

    async def stop(self) -> None:
        """Releases hung requests, closes listeners (bounded grace), stops the core."""
        if self.core is not None:
            self.core.faults.clear()
        closing: list[Any] = [runner.cleanup() for runner in self._runners]
        if self._grpc is not None:
            closing.append(self._grpc.stop(SHUTDOWN_GRACE_S))
        await asyncio.gather(*closing, return_exceptions=True)
        self._runners.clear()
        self._grpc = None
        if self.core is not None:
            await self.core.close()


class Simulator:
    """A Triton-compatible simulator on a background thread (context manager).

    Args:
        models: a ``ModelSet``, a model-set YAML path, or None for the built-in set.
        scenario: scenario applied to every model at start (see ``SCENARIOS``).
        seed: seeds every random draw (service-time noise, error bursts).
        host: bind address (loopback by default).
        http_port, grpc_port, metrics_port: 0 picks a free port.
        summary_latencies: also export Triton's optional summary families.
        histogram_latencies: also export ``nv_inference_first_response_histogram_ms`` for
            decoupled models, like Triton's ``--metrics-config histogram_latencies=true``.
        metrics_interval_s: how often GPU/CPU gauges refresh (Triton's default 2 s).
        model_control_mode: ``explicit`` (load/unload allowed), ``none`` or ``poll``
            (both refused with Triton's error, as a production server may be run).
        grpc_tls: serve gRPC over TLS (optionally mutual), as Triton's SSL flags do.
        response_cache_bytes: give the server a response cache of this many bytes, as
            Triton's ``--cache-config local,size=N`` does (None: no cache; models with
            ``response_cache`` then execute every request).
        host_cpu_utilization: pin ``nv_cpu_utilization`` to this value (0–1) instead of
            reading the host's ``/proc/stat``: a test whose advice must not change with
            its neighbours' load (a saturated host blocks advice).
        clock: ``virtual`` runs every ``run_async`` (an in-process load) on virtual time
            (``virtual_loop``), so its queues, batches and GPU readings are exact on any
            host; network traffic always runs on real time.
    """

    def __init__(
        self,
        models: ModelSet | str | Path | None = None,
        *,
        scenario: str = "healthy",
        seed: int = 0,
        host: str = "127.0.0.1",
        http_port: int = 0,
        grpc_port: int = 0,
        metrics_port: int = 0,
        summary_latencies: bool = False,
        metrics_interval_s: float = DEFAULT_METRICS_INTERVAL_S,
        model_control_mode: str = "explicit",
        grpc_tls: GrpcTLS | None = None,
        histogram_latencies: bool = False,
        clock: Clock = "real",
        response_cache_bytes: int | None = None,
        host_cpu_utilization: float | None = None,
    ) -> None:
        if clock not in ("real", "virtual"):
            raise ValueError(f"clock must be 'real' or 'virtual', not {clock!r}")
        self._clock = clock
        options = SimulatorOptions(
            scenario,
            seed,
            host,
            http_port,
            grpc_port,
            metrics_port,
            summary_latencies,
            metrics_interval_s,
            model_control_mode,
            grpc_tls,
            histogram_latencies,
            response_cache_bytes,
            host_cpu_utilization,
        )
        self._service = SimulatorService(resolve_model_set(models), options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_requested: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._endpoints: Endpoints | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self, timeout_s: float = START_TIMEOUT_S) -> Simulator:
        """Starts the thread and waits until every port is bound.

        Raises:
            TimeoutError: not ready within ``timeout_s``.
            OSError: a port could not be bound (or whatever else failed at start).
        """
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="tritonwatch-sim", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            self.stop()
            raise TimeoutError(f"simulator not ready after {timeout_s} s")
        if self._failure is not None:
            self._thread.join(timeout_s)
            raise self._failure
        return self

    def _run(self) -> None:
        loop = VirtualTimeLoop() if self._clock == "virtual" else precise_loop.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self) -> None:
        self._stop_requested = asyncio.Event()
        try:
            self._endpoints = await self._service.start()
        except BaseException as error:  # reported to the starting thread
            self._failure = error
            self._started.set()
            return
        self._started.set()
        await self._stop_requested.wait()
        await self._service.stop()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stops every listener and the thread (returns within about a second)."""
        loop, thread, requested = self._loop, self._thread, self._stop_requested
        if loop is not None and requested is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(requested.set)
        if thread is not None:
            thread.join(timeout_s)
        self._thread = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- where it listens -------------------------------------------------------------

    @property
    def endpoints(self) -> Endpoints:
        """The bound endpoints (only after ``start``)."""
        if self._endpoints is None:
            raise RuntimeError("the simulator is not running")
        return self._endpoints

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.endpoints.http_url

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` (tritonclient.grpc's form)."""
        return self.endpoints.grpc_url

    @property
    def metrics_url(self) -> str:
        """``http://127.0.0.1:PORT/metrics``."""
        return self.endpoints.metrics_url

    # -- control from other threads ---------------------------------------------------

    def call(self, function: Callable[[SimCore], T], timeout_s: float = 5.0) -> T:
        """Runs ``function(core)`` on the simulator's loop and returns its result."""

        async def invoke(core: SimCore) -> T:
            return function(core)

        return self.run_async(invoke, timeout_s)

    def run_async(
        self, function: Callable[[SimCore], Coroutine[Any, Any, T]], timeout_s: float = 60.0
    ) -> T:
        """Awaits ``function(core)`` on the simulator's loop (e.g. an in-process load);
        with ``clock="virtual"`` on virtual time (``timeout_s`` stays real seconds)."""
        loop, core = self._loop, self._service.core
        if loop is None or core is None or self._endpoints is None:
            raise RuntimeError("the simulator is not running")
        coroutine = function(core)
        if isinstance(loop, VirtualTimeLoop):
            coroutine = _on_virtual_time(loop, coroutine)
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout_s)

    def set_scenario(self, name: str, model: str | None = None) -> None:
        """Switches ``model`` (or every model) to scenario ``name``."""
        self.call(lambda core: core.set_scenario(name, model))

    def inject_fault(self, fault: Fault | Mapping[str, Any] | None = None, **fields: Any) -> int:
        """Puts a fault in force, given as a spec, a mapping, or keyword fields
        (``inject_fault(kind="latency_spike", factor=5)``); returns its id.
        ``kind="restart"`` restarts instead (returns 0)."""
        data = dict(fault) if isinstance(fault, Mapping) else fields
        if fault is None or isinstance(fault, Mapping):
            if data.get("kind") == "restart":
                self.restart()
                return 0
            fault = parse_fault(data)
        parsed = fault
        return self.call(lambda core: core.inject_fault(parsed))

    def clear_faults(self) -> None:
        """Lifts every fault; hung requests resume."""
        self.call(lambda core: core.clear_faults())

    def restart(self) -> None:
        """Resets every counter to zero, as a Triton restart does."""
        self.call(lambda core: core.restart())

    def state(self) -> dict[str, Any]:
        """The same JSON as ``GET /sim/state``."""
        return self.call(lambda core: core.state())

    def latency_samples(self, model: str) -> list[float]:
        """Ground truth: every server-side request duration (s) of ``model`` since start."""
        return self.call(lambda core: core.repository.slot(model).series.latency_samples())

    def poll_metrics(self) -> None:
        """Closes a metrics interval now (GPU utilisation/power/energy), as if it elapsed."""
        self.call(lambda core: core.poll())


async def _on_virtual_time(loop: VirtualTimeLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    with loop.virtual():
        return await coroutine
