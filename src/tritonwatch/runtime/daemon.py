"""The one owner of every loop, server and client (STYLE: "one owner for every loop").

:class:`Daemon` starts the exporter HTTP server and the APScheduler jobs, owns the
probes' connections, swaps the config atomically on reload, and stops everything
within a bounded time. Its run state moves starting → started → stopping → stopped.

Who owns what (one owner per piece of shared state):

* the config in force and its generation: :class:`~tritonwatch.runtime.config_owner.
  ConfigOwner`, written by :meth:`Daemon.reload` only. Jobs never apply a config they
  read: the discovery jobs read without the lock and hand back what they found with
  the generation they read under; a stale one is dropped (a reload is never undone);
* what is in force from it — jobs, probes, scrapers, SLOs, canaries, the committed
  discovered models: the lifecycle (start, reload, apply, stop), one at a time under
  ``_lifecycle``; jobs are reconciled against the plan, not removed and re-added;
* each target's readiness probe: :class:`~tritonwatch.runtime.readiness_probes.
  ReadinessProbes` (a swapped probe is closed once no check uses it);
* the running canaries: the canary runner's loop, one reconcile at a time.

A reload whose apply fails or times out keeps the running config, says so, and
returns False; it never raises into the main thread.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from enum import StrEnum
from pathlib import Path
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from tritonwatch import __version__
from tritonwatch.common.build_facts import build_facts
from tritonwatch.common.file_stamps import FileStamps, file_stamps
from tritonwatch.common.listen import ListenAddress, parse_listen_address
from tritonwatch.common.logs import REDACTOR, get_logger
from tritonwatch.config import Config, ConfigError, load_config
from tritonwatch.config.detail import Detail
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.export.capacity_metrics import CapacityCollector
from tritonwatch.export.detail import DetailRegistry
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
from tritonwatch.probe.readiness import readiness_probe_for
from tritonwatch.probe.runner import CanaryRunner
from tritonwatch.records.observations import ReadinessObservation
from tritonwatch.records.sweep_records import SweepBoard
from tritonwatch.runtime.bottleneck_board import BottleneckBoard
from tritonwatch.runtime.capacity_board import CapacityBoard
from tritonwatch.runtime.config_owner import ConfigOwner
from tritonwatch.runtime.evaluator import Evaluator
from tritonwatch.runtime.fleet import Shard, discovery_files, effective_config
from tritonwatch.runtime.histogram_bounds import slo_buckets, stream_buckets
from tritonwatch.runtime.job_plan import JobKind, JobSpec, job_plan, sweep_job_id
from tritonwatch.runtime.model_discovery import (
    FoundModel,
    ModelDiscovery,
    signatures,
    with_discovered_models,
)
from tritonwatch.runtime.readiness_probes import ProbeFactory, ReadinessProbes
from tritonwatch.runtime.scheduled_jobs import ScheduledJobs
from tritonwatch.runtime.scheduled_sweeps import run_scheduled_sweep
from tritonwatch.scrape.nvml_sampler import NvmlSampler
from tritonwatch.scrape.triton_scrapers import TritonScrapers, canary_totals
from tritonwatch.state.canary_board import CanaryBoard, SeriesKey
from tritonwatch.state.readiness_board import ReadinessBoard
from tritonwatch.state.schedule_board import ScheduleBoard
from tritonwatch.state.stream_board import StreamBoard

_log = get_logger("daemon")
SCHEDULER_THREADS = 8
STALE_READS_REDONE = 2
"""How many times a repository-index read that a reload made stale is made again at
once under the config in force (then the next read is the next scheduled one)."""
Found = Mapping[str, tuple[FoundModel, ...]]


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
        self._owner = ConfigOwner(config, wall_clock)
        """The config in force; :meth:`reload` alone puts another in force."""
        self._shard = shard or Shard()
        self._discovery_stamps: FileStamps = ()
        self._models = ModelDiscovery(timeout=config.scrape.timeout)
        self._models_read = False
        """Whether the repository indexes were read once (the first read is at start)."""
        self._discovering = False
        """Whether a target this replica owns discovers its models."""
        self._lifecycle = threading.RLock()
        """Start, reload, apply and stop one at a time: a reload (main thread), a
        discovery job's apply (a scheduler thread) and a stop (the signal handler's poll)
        may race. It guards everything put in force (see the module's docstring)."""
        self._listen_override = listen_override
        self._lifecycle_reload = lifecycle_reload
        self._clock = clock
        self._wall_clock = wall_clock
        self._state = RunState.STOPPED
        self._probes = ReadinessProbes(probe_factory)
        self._readiness = ReadinessBoard()
        self._schedule_board = ScheduleBoard(clock)
        self._build = build_facts()
        self._effective = config
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(SelfCollector(self._self_status))
        self.registry.register(ProcessCollector(registry=None))
        self.canary_board = CanaryBoard(slo_buckets(config))
        self.triton = TritonScrapers(
            canary_totals=canary_totals(self.canary_board, clock), clock=clock
        )
        self.registry.register(
            CanaryCollector(
                self.canary_board,
                clock,
                server_quantiles=lambda: server_quantile_samples(self.triton.states()),
                full=self._full_detail,
            )
        )
        self.stream_board = StreamBoard(*stream_buckets(config))
        """The streaming canaries' TTFT/ITL histograms and windows (issue 18)."""
        self.registry.register(StreamCollector(self.stream_board, clock))
        self.bottlenecks = BottleneckBoard(self.triton.states)
        """The bottleneck board: every target's scraped state with its breakdowns and
        bottlenecks, judged once per scrape (:meth:`_scrape`) or reload (:meth:`_apply`);
        the exporter, the evaluator and the status page read it."""
        self.registry.register(
            TritonModelCollector(self.bottlenecks.states, full=self._full_detail)
        )
        self.registry.register(LlmCollector(self.bottlenecks.states))
        self._nvml = NvmlSampler(nvml, clock=clock) if config.nvml.enabled is not False else None
        self.registry.register(
            GpuMetricsCollector(
                nvml=self._nvml.state if self._nvml is not None else None,
                triton=self.triton.triton_gpus,
            )
        )
        self.sweeps = SweepBoard()
        self.registry.register(SweepCollector(self.sweeps))
        self.capacity = CapacityBoard(self.sweeps, self._bring_sweep_forward, clock=clock)
        self.registry.register(CapacityCollector(self.capacity, wall_clock))
        self.evaluator = Evaluator(
            config,
            canary_board=self.canary_board,
            triton=self.triton,
            judged_states=self.bottlenecks.states,
            registry=self.registry,
            stream_board=self.stream_board,
            readiness=self._readiness.snapshot,
            capacity=self.capacity.readings,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._canaries = CanaryRunner(self.canary_board, self.stream_board)
        self.registry.register(
            LivenessCollector(self._stalled, lambda: self._canaries.engine_restarts)
        )
        self._stopping = threading.Event()
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(SCHEDULER_THREADS)},
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone=UTC,
        )
        self._jobs = ScheduledJobs(self._scheduler, self._schedule_board, clock)
        self._server: ExporterServer | None = None
        self._effective_targets: list[str] = []
        REDACTOR.set_secrets(config.secret_values())

    def _full_detail(self) -> bool:
        """Whether ``/metrics`` is at ``exporter.detail: full`` (the collectors skip the
        families of that level only below it)."""
        return self._effective.exporter.detail == Detail.FULL

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def config(self) -> Config:
        """The config in force."""
        return self._owner.config

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
            config = self._owner.config
            exporter = config.exporter
            self._server = ExporterServer(
                self._listen_address(config),
                exporter_app(
                    DetailRegistry(self.registry, lambda: self._effective.exporter.detail),
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
            if self._nvml is not None and not self._nvml.start() and config.nvml.enabled is True:
                _log.error("nvml_unavailable", reason=self._nvml.disabled_reason)
            self._scheduler.start()
            self._canaries.start([])
            # Started only once the first apply is whole: until then readiness says the
            # daemon is starting instead of reading scrapers in place and canaries not yet.
            self._apply()
            self.evaluator.start(f"{self.exporter_url}/metrics")  # after _apply: SLO specs known
            self._state = RunState.STARTED
            _log.info("started", targets=len(self._effective_targets))

    def reload(self) -> bool:
        """Re-reads the config file and puts it in force only if it is entirely valid and
        its apply succeeds; otherwise the running config stays in force and the failure
        shows (``tritonwatch_config_last_reload_successful`` 0 and ``config_reload_failed``
        or ``config_apply_failed`` in the log). Never raises for a failed apply.

        Returns:
            True when the new config is in force; False when the old one stays.
        """
        with self._lifecycle:
            running = self._owner.config
            if self._config_path is None:
                new_config = running  # SIGHUP re-applies the command line's config
            else:
                try:
                    new_config = load_config(self._config_path)
                except ConfigError as error:
                    self._owner.reloaded(succeeded=False)
                    _log.error("config_reload_failed", error=str(error))
                    return False
                if self._listen_address(new_config) != self._listen_address(running):
                    _log.warning(
                        "exporter_listen_change_needs_restart", listen=new_config.exporter.listen
                    )
            # Both configs' secrets while either may be logged; the kept one's after.
            REDACTOR.set_secrets([*running.secret_values(), *new_config.secret_values()])
            self._owner.put(new_config)  # from here, what jobs read before is stale
            try:
                self._apply()
            except Exception as error:  # an apply timed out or failed part-way
                self._keep_running(running, error)
                return False
            REDACTOR.set_secrets(new_config.secret_values())
            if self._config_path is None:
                _log.info("config_reapplied", targets=len(self._effective_targets))
            else:
                self._owner.reloaded(succeeded=True)
                _log.info("config_reloaded", targets=len(self._effective_targets))
            return True

    def _keep_running(self, running: Config, error: Exception) -> None:
        """A reload's apply failed part-way: says so, and puts the running config back in
        force (a new generation), parts the failed apply changed included. A restore
        that fails too is logged; the canaries' reconciles run in the order asked, so a
        timed-out one is followed by the restore's, wherever it stands."""
        self._owner.reloaded(succeeded=False)
        _log.error("config_apply_failed", error=str(error), kept="the running config")
        self._owner.put(running)
        try:
            self._apply()
        except Exception as again:
            _log.error("config_restore_incomplete", error=str(again))
        REDACTOR.set_secrets(running.secret_values())

    @property
    def _base(self) -> Path:
        """What relative discovery paths are relative to."""
        return self._config_path.parent if self._config_path is not None else Path.cwd()

    def _apply(self, found: Found | None = None) -> None:
        """Puts the config in force (the owner's; no caller hands one in) — with
        discovered targets, sharded, and the models ``found`` on them (None: those
        committed) — into force: jobs, scrapers, SLOs, canaries; then commits ``found``.
        Series of models no longer in it are dropped here, whatever removed them (a
        reload, discovery); the canaries of unchanged models run on, a model reloaded
        differently (its discovery signature changed) gets its canary rebuilt. An apply
        that raises part-way commits nothing: the next read sees the change again."""
        with self._lifecycle:
            if self._state not in (RunState.STARTING, RunState.STARTED):
                return  # a discovery job that fired while the daemon stopped
            config = self._owner.config
            found = self._models.found if found is None else found
            self._discovery_stamps = file_stamps(discovery_files(config.discovery, self._base))
            sharded = effective_config(config, self._base, self._shard)
            effective = with_discovered_models(sharded, found)
            discovering = [t.name for t in sharded.targets if t.selection is not None]
            self._discovering = bool(discovering)
            if any(name not in found for name in discovering):
                self._models_read = False  # a target new to discovery: read it now
            self._effective_targets = [target.name for target in effective.targets]
            self._effective = effective
            self.triton.apply(effective)
            self.bottlenecks.apply(effective)  # re-judged now with the new thresholds
            # The effective config for both: advice, like SLOs, covers every model watched.
            self.evaluator.apply(effective, effective)
            self._schedule(effective)
            self.canary_board.set_buckets(slo_buckets(effective))
            ttft, itl = stream_buckets(effective)
            self.stream_board.set_buckets(ttft=ttft, itl=itl)
            self._canaries.apply(canary_plans(effective), signatures(found))
            self._models.commit(found)

    def _rediscover(self) -> None:
        """The discovery job: re-applies the config in force when a discovery file
        changed. It looks at the files without the lock; a reload meanwhile looked at
        them itself (its apply did), so a look made under an older generation is dropped."""
        seen = self._owner.snapshot()
        stamps = file_stamps(discovery_files(seen.config.discovery, self._base))
        with self._lifecycle:
            if not self._owner.is_current(seen.generation) or stamps == self._discovery_stamps:
                return
            _log.info("discovery_changed", files=len(stamps))
            self._apply()

    def _refresh_models(self) -> None:
        """The model-discovery job: reads the repository index of every discovering
        target this replica owns, without the lock (network I/O); then, under it,
        re-applies the config in force when the models changed. A read made under a
        config that a reload replaced meanwhile is dropped — applied, it would undo the
        reload — and made again under the config in force (:data:`STALE_READS_REDONE`)."""
        reloaded = self.triton.take_reloaded()  # (scrapers' news: each described again)
        refused = {(target, model) for target, model, _ in self.canary_board.input_refused()}
        for _ in range(1 + STALE_READS_REDONE):
            seen = self._owner.snapshot()
            config = effective_config(seen.config, self._base, self._shard)
            found = self._models.read(config, reloaded=reloaded, refused=refused)
            with self._lifecycle:
                if self._owner.is_current(seen.generation):
                    self._models_read = True
                    if self._models.differs(found):
                        self._apply(found)
                    else:
                        self._models.commit(found)  # the index stamps read, nothing else
                    return
            _log.info("model_discovery_read_dropped", reason="a reload during the read")

    def _schedule(self, config: Config) -> None:
        """Brings the jobs to the plan (:func:`~tritonwatch.runtime.job_plan.job_plan`),
        touching only what changed (:class:`~tritonwatch.runtime.scheduled_jobs.
        ScheduledJobs`); probes of unchanged targets are kept, their connections with them."""
        plan = job_plan(
            config,
            discovering=self._discovering,
            models_read=self._models_read,
            nvml=self._nvml is not None and self._nvml.enabled,
            jitter=lambda bound: random.uniform(0, bound),  # noqa: S311
        )
        self._readiness.set_targets([target.name for target in config.targets])
        self._probes.swap(config.targets, config.scrape.timeout)
        swept = {spec.sweep.key for spec in plan if spec.sweep is not None}
        self.sweeps.declare(swept)
        self.capacity.apply(config, swept)
        self._jobs.reconcile(plan, self._work)

    def _work(self, spec: JobSpec) -> Callable[[], object]:
        """What a job of the plan does."""
        if spec.kind is JobKind.SWEEP:
            assert spec.sweep is not None
            return functools.partial(
                run_scheduled_sweep,
                spec.sweep,
                self.sweeps,
                self._pause_for_sweep,
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
        """One scrape of ``target``, then its verdicts (judged once, here) and findings."""
        outcome = self.triton.scrape(target)
        state = self.bottlenecks.publish(target)
        if state is not None:
            self.capacity.observe(state)
        self.evaluator.observe_scrape(outcome)

    def _pause_for_sweep(self, target: str, model: str, paused: bool) -> None:
        """A sweep's start and end: the model's canary pauses, its load samples stop."""
        self._canaries.set_paused(target, model, paused)
        self.capacity.set_sweeping(target, model, paused)

    def _bring_sweep_forward(self, target: str, model: str) -> None:
        """A stale capacity's call: the model's scheduled sweep runs now."""
        self._jobs.bring_forward(sweep_job_id(target, model))

    def _check_readiness(self, target: str) -> None:
        observation = self._probes.check(target)
        if observation is None:
            return
        previous = self._readiness.record(observation)
        if previous is None or previous.ready != observation.ready:
            _readiness_log(observation)

    def _self_status(self) -> SelfStatus:
        reload = self._owner.reload_status()
        readiness = self._readiness.snapshot()
        return SelfStatus(self._build, readiness, reload.succeeded, reload.last_success)

    def status_snapshot(self) -> StatusSnapshot:
        """What the status page shows, assembled from the latest readings."""
        now = self._clock()
        history = self.evaluator.p95_history
        return status_snapshot(
            StatusInputs(
                config=self._effective,
                canary=self.canary_board.snapshot(now),
                readiness=self._readiness.snapshot(),
                triton=self.bottlenecks.states(),
                sweeps=self.sweeps.snapshot(),
                capacity=self.capacity.readings(),
                replicas=self.capacity.replicas(),
                wall_time=self._wall_clock(),
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

    def status_page(self, page: int = 1) -> str:
        """The status page's ``page`` (its summary table's; 1 is the first)."""
        return render_status_page(self.status_snapshot(), page)

    def health(self) -> HealthReport:
        """Healthy when started and every job ran on schedule (``/health``)."""
        started = self._state == RunState.STARTED
        late = self._schedule_board.late_jobs() if started else []
        stalled = self._stalled() if started else {}
        return health_report(
            str(self._state),
            started=started,
            late=late,
            jobs=len(self._probes),
            stalled=[key for key, is_stalled in stalled.items() if is_stalled],
            engine_restarts=self._canaries.engine_restarts,
            engine_recovering=started and self._canaries.engine_recovering(),
        )

    def readiness(self) -> Readiness:
        """Ready (``/-/ready``) once started with its config loaded, every target scraped
        once and every canary's first request answered (or its model's metadata refused,
        the canary skipped, or its circuit open): from then on every series it exports
        says something true."""
        if self._state != RunState.STARTED:
            return Readiness((f"the daemon to start (it is {self._state})",))
        waiting = [
            f"the first scrape of {state.target}"
            for state in self.triton.states()
            if not state.sources
        ]
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
            self._probes.close()
            self._state = RunState.STOPPED
            _log.info("stopped")


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
