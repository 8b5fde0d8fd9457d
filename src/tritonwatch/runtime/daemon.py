"""The one owner of every loop, server and client (STYLE: "one owner for every loop").

:class:`Daemon` starts the exporter HTTP server and the APScheduler jobs, owns the
probes' connections, swaps the config atomically on reload, and stops everything
within a bounded time. Its run state moves starting → started → stopping → stopped.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from tritonwatch import __version__
from tritonwatch.common.build_facts import build_facts
from tritonwatch.common.file_stamps import FileStamps, file_stamps
from tritonwatch.common.listen import ListenAddress, parse_listen_address
from tritonwatch.common.logs import REDACTOR, get_logger
from tritonwatch.config import Config, ConfigError, TargetConfig, load_config
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.export.gpu_metrics import GpuMetricsCollector
from tritonwatch.export.health import health_report
from tritonwatch.export.http_server import ExporterServer, HealthReport, exporter_app
from tritonwatch.export.lifecycle import Lifecycle, Readiness
from tritonwatch.export.liveness_metrics import LivenessCollector
from tritonwatch.export.llm_metrics import LlmCollector
from tritonwatch.export.self_metrics import SelfCollector, SelfStatus
from tritonwatch.export.status_page import StatusSnapshot, render_status_page
from tritonwatch.export.status_view import StatusInputs, status_snapshot
from tritonwatch.export.stream_metrics import StreamCollector
from tritonwatch.export.sweep_metrics import SweepCollector
from tritonwatch.export.triton_metrics import TritonModelCollector, server_quantile_samples
from tritonwatch.probe.canary.plans import canary_plans
from tritonwatch.probe.interfaces import ReadinessProbe
from tritonwatch.probe.readiness import readiness_probe_for
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.records.observations import ReadinessObservation
from tritonwatch.records.sweep_records import SweepBoard
from tritonwatch.runtime.bottleneck_board import BottleneckBoard
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.runtime.fleet import Shard, discovery_files, effective_config
from tritonwatch.runtime.job_plan import JobKind, JobSpec, job_plan
from tritonwatch.runtime.model_discovery import ModelDiscovery, signatures, with_discovered_models
from tritonwatch.runtime.scheduled_sweeps import run_scheduled_sweep
from tritonwatch.scrape.nvml_sampler import NvmlSampler
from tritonwatch.scrape.triton_scrapers import TritonScrapers, canary_totals
from tritonwatch.state.canary_board import CanaryBoard, SeriesKey, latency_buckets
from tritonwatch.state.readiness_board import ReadinessBoard
from tritonwatch.state.schedule_board import ScheduleBoard
from tritonwatch.state.stream_board import ITL_DEFAULT_BUCKETS, TTFT_DEFAULT_BUCKETS, StreamBoard

ProbeFactory = Callable[[TargetConfig, float], ReadinessProbe]
_log = get_logger("daemon")
SCHEDULER_THREADS = 8


class RunState(StrEnum):
    STARTING = "starting"
    STARTED = "started"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Daemon:
    """Runs tritonwatch for one config file.

    Args:
        config_path: the file to (re)load on SIGHUP; None when the config came from
            the command line (``run --url``): SIGHUP then only re-applies it.
        config: the already-validated contents of ``config_path``.
        listen_override: the ``--listen`` flag, which wins over ``exporter.listen``.
        probe_factory: builds a target's readiness probe (tests inject their own).
        clock: monotonic seconds; wall_clock: Unix seconds.
        nvml: the ``pynvml`` module or a stand-in with its functions (a
            :class:`~tritonwatch.scrape.nvml_fake.FakeNvml` where there is no GPU);
            None imports ``pynvml`` when NVML starts.
        lifecycle_reload: what ``POST /-/reload`` calls (the process's reload, as
            SIGHUP's); None refuses it (``--web.enable-lifecycle`` is off).
    """

    def __init__(
        self,
        config_path: Path | None,
        config: Config,
        *,
        listen_override: str | None = None,
        shard: Shard | None = None,
        probe_factory: ProbeFactory = readiness_probe_for,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        nvml: Any = None,
        lifecycle_reload: Callable[[], bool] | None = None,
    ) -> None:
        self._config_path = config_path
        self._config = config
        self._shard = shard or Shard()
        self._discovery_stamps: FileStamps = ()
        self._models = ModelDiscovery(timeout=config.scrape.timeout)
        self._models_read = False
        """Whether the repository indexes were read once (the first read is at start)."""
        self._discovering = False
        """Whether a target this replica owns discovers its models."""
        self._lifecycle = threading.RLock()
        """Start, reload, apply and stop one at a time: a reload (main thread), a
        discovery job (a scheduler thread) and a stop (the signal handler's poll) may
        race, and a reload must swap the config atomically."""
        self._listen_override = listen_override
        self._lifecycle_reload = lifecycle_reload
        self._probe_factory = probe_factory
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.RLock()
        self._state = RunState.STOPPED
        self._probes: dict[str, tuple[TargetConfig, float, ReadinessProbe]] = {}
        self._board = ReadinessBoard()
        self._schedule_board = ScheduleBoard(clock)
        self._last_reload_ok = True
        self._last_reload_success = wall_clock()
        self._build = build_facts()
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(SelfCollector(self._self_status))
        self.registry.register(ProcessCollector(registry=None))
        self.canary_board = CanaryBoard(_slo_buckets(config))
        self.triton = TritonScrapers(
            canary_totals=canary_totals(self.canary_board, clock), clock=clock
        )
        self.registry.register(
            CanaryCollector(
                self.canary_board,
                clock,
                server_quantiles=lambda: server_quantile_samples(self.triton.states()),
            )
        )
        self.stream_board = StreamBoard(*_stream_buckets(config))
        """The streaming canaries' TTFT/ITL histograms and windows (issue 18)."""
        self.registry.register(StreamCollector(self.stream_board, clock))
        self.judged = BottleneckBoard(self.triton.states)
        """The scraped states with their breakdowns and bottlenecks, as exported."""
        self.registry.register(TritonModelCollector(self.judged.states))
        self.registry.register(LlmCollector(self.judged.states))
        self._nvml = NvmlSampler(nvml, clock=clock) if config.nvml.enabled is not False else None
        self.registry.register(
            GpuMetricsCollector(
                nvml=self._nvml.state if self._nvml is not None else None,
                triton=self.triton.triton_gpus,
            )
        )
        self.evaluator = Evaluator(
            config, canary_board=self.canary_board, triton=self.triton,
            registry=self.registry, stream_board=self.stream_board,
            readiness=self._board.snapshot, clock=clock, wall_clock=wall_clock,
        )  # fmt: skip
        self._canaries = CanaryRunner(self.canary_board, self.stream_board)
        self.registry.register(
            LivenessCollector(self._stalled, lambda: self._canaries.engine_restarts)
        )
        self.sweeps = SweepBoard()
        self.registry.register(SweepCollector(self.sweeps))
        self._stopping = threading.Event()
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(SCHEDULER_THREADS)},
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone=UTC,
        )
        self._server: ExporterServer | None = None
        self._effective_targets: list[str] = []
        self._effective = config
        REDACTOR.set_secrets(config.secret_values())

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def config(self) -> Config:
        return self._config

    @property
    def exporter_url(self) -> str:
        """Where the exporter listens, once started."""
        if self._server is None:
            raise RuntimeError("the exporter is not started")
        return f"{self._server.scheme}://{self._server.address}"

    def _listen_address(self, config: Config) -> ListenAddress:
        return parse_listen_address(self._listen_override or config.exporter.listen)

    def start(self) -> None:
        """Starts the exporter and the jobs; returns once both are running."""
        with self._lifecycle:
            self._state = RunState.STARTING
            source = str(self._config_path) if self._config_path else "command line"
            _log.info("starting", version=__version__, config=source)
            exporter = self._config.exporter
            self._server = ExporterServer(
                self._listen_address(self._config),
                exporter_app(
                    self.registry,
                    self.health,
                    self.status_page,
                    Lifecycle(self.readiness, self._lifecycle_reload),
                ),
                exporter.tls_cert_file,
                exporter.tls_key_file,
                web_config_file=exporter.web_config_file,
            )
            self._server.start()
            _log.info("exporter_listening", url=self.exporter_url)
            if (
                self._nvml is not None
                and not self._nvml.start()
                and self._config.nvml.enabled is True
            ):
                _log.error("nvml_unavailable", reason=self._nvml.disabled_reason)
            self._scheduler.start()
            self._canaries.start([])
            self._state = RunState.STARTED
            self._apply(self._config)
            self.evaluator.start(f"{self.exporter_url}/metrics")  # after _apply: SLO specs known
            _log.info("started", targets=len(self._effective_targets))

    def reload(self) -> bool:
        """Re-reads the config file; swaps to it only if it is entirely valid.

        Returns:
            True when the new config is in force; False when the old one stays.
        """
        with self._lifecycle:
            if self._config_path is None:
                if self._state == RunState.STARTED:
                    self._apply(self._config)
                _log.info("config_reapplied", targets=len(self._effective_targets))
                return True
            try:
                new_config = load_config(self._config_path)
            except ConfigError as error:
                with self._lock:
                    self._last_reload_ok = False
                _log.error("config_reload_failed", error=str(error))
                return False
            if self._listen_address(new_config) != self._listen_address(self._config):
                _log.warning(
                    "exporter_listen_change_needs_restart", listen=new_config.exporter.listen
                )
            REDACTOR.set_secrets(new_config.secret_values())
            with self._lock:
                self._config = new_config
                self._last_reload_ok = True
                self._last_reload_success = self._wall_clock()
            if self._state == RunState.STARTED:
                self._apply(new_config)
            _log.info("config_reloaded", targets=len(self._effective_targets))
            return True

    @property
    def _base(self) -> Path:
        """What relative discovery paths are relative to."""
        return self._config_path.parent if self._config_path is not None else Path.cwd()

    def _apply(self, config: Config) -> None:
        """Puts ``config`` — with discovered targets, sharded, and the models discovered
        on them — into force: jobs, scrapers, SLOs, canaries. Series of models no
        longer in it are dropped here, whatever removed them (a reload, discovery); the
        canaries of unchanged models run on, a model reloaded differently (its discovery
        signature changed) gets its canary rebuilt."""
        with self._lifecycle:
            if self._state != RunState.STARTED:
                return  # a discovery job that fired while the daemon stopped
            self._discovery_stamps = file_stamps(discovery_files(config.discovery, self._base))
            sharded = effective_config(config, self._base, self._shard)
            found = self._models.found
            effective = with_discovered_models(sharded, found)
            discovering = [t.name for t in sharded.targets if t.selection is not None]
            self._discovering = bool(discovering)
            if any(name not in found for name in discovering):
                self._models_read = False  # a target new to discovery: read it now
            self._effective_targets = [target.name for target in effective.targets]
            self._effective = effective
            self.triton.apply(effective)
            self.judged.apply(effective)
            # The effective config for both: advice, like SLOs, covers every model watched.
            self.evaluator.apply(effective, effective)
            self._schedule(effective)
            self.canary_board.set_buckets(_slo_buckets(effective))
            ttft, itl = _stream_buckets(effective)
            self.stream_board.set_buckets(ttft=ttft, itl=itl)
            self._canaries.apply(canary_plans(effective), signatures(found))

    def _rediscover(self) -> None:
        """The discovery job: re-applies the config when a discovery file changed."""
        with self._lock:
            config = self._config
        current = file_stamps(discovery_files(config.discovery, self._base))
        if current != self._discovery_stamps:
            _log.info("discovery_changed", files=len(current))
            self._apply(config)

    def _refresh_models(self) -> None:
        """The model-discovery job: reads the repository index of every discovering
        target this replica owns; re-applies the config when the models changed."""
        with self._lock:
            config = self._config
        sharded = effective_config(config, self._base, self._shard)
        changed = self._models.refresh(sharded)
        self._models_read = True
        if changed and self._state == RunState.STARTED:
            self._apply(config)

    def _schedule(self, config: Config) -> None:
        """(Re)creates every job of the plan (:func:`~tritonwatch.runtime.job_plan.job_plan`);
        probes of unchanged targets are kept, their connections with them."""
        names = [target.name for target in config.targets]
        plan = job_plan(
            config,
            discovering=self._discovering,
            models_read=self._models_read,
            nvml=self._nvml is not None and self._nvml.enabled,
            jitter=lambda bound: random.uniform(0, bound),  # noqa: S311
        )
        with self._lock:
            self._scheduler.remove_all_jobs()
            self._schedule_board.clear()
            self._board.set_targets(names)
            stale = dict(self._probes)
            self._probes = {}
            for target in config.targets:
                kept = stale.get(target.name)
                if kept and kept[0] == target and kept[1] == config.scrape.timeout:
                    self._probes[target.name] = stale.pop(target.name)
                else:
                    probe = self._probe_factory(target, config.scrape.timeout)
                    self._probes[target.name] = (target, config.scrape.timeout, probe)
        for _, _, probe in stale.values():
            probe.close()
        self.sweeps.declare(spec.sweep.key for spec in plan if spec.sweep is not None)
        now, wall_now = self._clock(), datetime.now(UTC)
        for spec in plan:
            work = self._work(spec)
            if spec.watched:
                self._schedule_board.expect(spec.job_id, spec.interval, now + spec.first_delay)
                work = functools.partial(self._run_watched, spec.job_id, work)
            self._scheduler.add_job(
                work,
                IntervalTrigger(seconds=spec.interval, timezone=UTC),
                id=spec.job_id,
                next_run_time=wall_now + timedelta(seconds=spec.first_delay),
                misfire_grace_time=spec.misfire_grace,
            )

    def _work(self, spec: JobSpec) -> Callable[[], object]:
        """What a job of the plan does."""
        if spec.kind is JobKind.SWEEP:
            assert spec.sweep is not None
            return functools.partial(
                run_scheduled_sweep,
                spec.sweep,
                self.sweeps,
                self._canaries.set_paused,
                self._stopping,
                self._wall_clock,
            )
        if spec.kind is JobKind.NVML:
            assert self._nvml is not None  # the plan has NVML only when it started
            return self._nvml.sample
        if spec.kind in (JobKind.READINESS, JobKind.SCRAPE):
            check = self._check_readiness if spec.kind is JobKind.READINESS else self._scrape
            return functools.partial(check, spec.target)
        return {
            JobKind.EVALUATE: self.evaluator.evaluate,
            JobKind.SLO_SAVE: self.evaluator.slo.save,
            JobKind.FILE_DISCOVERY: self._rediscover,
            JobKind.MODEL_DISCOVERY: self._refresh_models,
        }[spec.kind]

    def _scrape(self, target: str) -> None:
        """One scrape of ``target``, then its verdicts and findings."""
        outcome = self.triton.scrape(target)
        self.judged.observe(target)
        self.evaluator.observe_scrape(outcome)

    def _run_watched(self, job_id: str, work: Callable[[], object]) -> None:
        """Runs a job's work and records that it ran (for /health), whatever happened."""
        try:
            work()
        except Exception:  # a job logs and runs again next time; it never dies
            _log.exception("job_failed", job=job_id)
        finally:
            self._schedule_board.ran(job_id)

    def _check_readiness(self, target: str) -> None:
        with self._lock:
            entry = self._probes.get(target)
        if entry is None:
            return
        observation = entry[2].check()
        previous = self._board.record(observation)
        if previous is None or previous.ready != observation.ready:
            _readiness_log(observation)

    def _self_status(self) -> SelfStatus:
        with self._lock:
            ok, success = self._last_reload_ok, self._last_reload_success
        return SelfStatus(self._build, self._board.snapshot(), ok, success)

    def status_snapshot(self) -> StatusSnapshot:
        """What the status page shows, assembled from the latest readings."""
        now = self._clock()
        history = self.evaluator.p95_history
        return status_snapshot(
            StatusInputs(
                config=self._effective,
                canary=self.canary_board.snapshot(now),
                readiness=self._board.snapshot(),
                triton=self.judged.states(),
                sweeps=self.sweeps.snapshot(),
                slo_statuses=self.evaluator.statuses(),
                not_serving=self.evaluator.not_serving(),
                advice=self.evaluator.recommendations.by_model(),
                advice_blocked=self.evaluator.recommendations.blocked(),
                experiments=self.evaluator.experiments(),
                p95_history=lambda key: history.points(key, now),
                healthy=self.health().healthy,
                streams=self.stream_board.snapshot(now),
            )
        )

    def status_page(self) -> str:
        return render_status_page(self.status_snapshot())

    def health(self) -> HealthReport:
        """Healthy when started and every job ran on schedule (``/health``)."""
        started = self._state == RunState.STARTED
        late = self._schedule_board.late_jobs() if started else []
        stalled = self._stalled() if started else {}
        return health_report(
            str(self._state), started=started, late=late, jobs=len(self._probes),
            stalled=[key for key, is_stalled in stalled.items() if is_stalled],
            engine_restarts=self._canaries.engine_restarts,
            engine_recovering=started and self._canaries.engine_recovering(),
        )  # fmt: skip

    def readiness(self) -> Readiness:
        """Ready (``/-/ready``) once started with its config loaded, every target scraped
        once and every canary's first request answered (or its model's metadata refused,
        the canary skipped, or its circuit open): from then on every series it exports
        says something true."""
        if self._state != RunState.STARTED:
            return Readiness((f"the daemon to start (it is {self._state})",))
        waiting = [f"the first scrape of {state.target}" for state in self.triton.states()
                   if not state.sources]  # fmt: skip
        board = self.canary_board
        excused = board.skipped().keys() | board.open_circuits() | board.unprepared()
        waiting += [
            f"the first canary answer of {snap.target}/{snap.model} ({snap.protocol})"
            for snap in self.canary_board.snapshot(self._clock())
            if snap.last_outcome_at is None
            and (snap.target, snap.model, snap.protocol) not in excused
        ]
        return Readiness(tuple(waiting))

    def _stalled(self) -> dict[SeriesKey, bool]:
        """Every running canary's liveness verdict now (True: stalled)."""
        return self._canaries.stalled(self._clock())

    def stop(self) -> None:
        """Stops jobs, exporter and clients. Jobs in flight are not waited for: each
        is bounded by its own timeout and the process may exit under them."""
        with self._lifecycle:
            if self._state == RunState.STOPPED:
                return
            self._state = RunState.STOPPING
            self._stopping.set()  # a running sweep ends at its next window boundary
            _log.info("stopping")
            if self._scheduler.running:
                self._scheduler.shutdown(wait=False)
            self._canaries.stop()
            self.triton.close()
            if self._nvml is not None:
                self._nvml.close()
            self.evaluator.stop()
            if self._server is not None:
                self._server.stop()
            with self._lock:
                probes, self._probes = self._probes, {}
            for _, _, probe in probes.values():
                probe.close()
            self._state = RunState.STOPPED
            _log.info("stopped")


def _slo_buckets(config: Config) -> tuple[float, ...]:
    """Histogram buckets with every configured latency threshold among them."""
    return latency_buckets(
        config.slo_for(model).latency.threshold
        for target in config.targets
        for model in target.models
    )


def _stream_buckets(config: Config) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """TTFT and ITL histogram buckets with every TTFT / ITL threshold among them — those
    written and those a model gets once it streams (their defaults) — so each streaming
    SLI is a bucket ratio with no interpolation."""
    slos = [
        config.slo_for(model).judged(streams=True)
        for target in config.targets
        for model in target.models
    ]
    ttft = latency_buckets((s.ttft.threshold for s in slos if s.ttft), TTFT_DEFAULT_BUCKETS)
    itl = latency_buckets((s.itl.threshold for s in slos if s.itl), ITL_DEFAULT_BUCKETS)
    return ttft, itl


def _readiness_log(observation: ReadinessObservation) -> None:
    if observation.ready:
        _log.info("target_ready", target=observation.target)
    else:
        _log.warning(
            "target_not_ready",
            target=observation.target,
            outcome=str(observation.outcome),
            error=observation.error,
        )
