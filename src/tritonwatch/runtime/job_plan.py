"""What the daemon runs when: the job plan, a pure function of the effective config.

Every periodic piece of work is one :class:`JobSpec`: an id, what kind of work, its
interval, when it first runs, and whether ``/health`` expects it on time (the
"watched" jobs). :class:`~tritonwatch.runtime.daemon.Daemon` turns each spec into one
APScheduler job; what a kind *does* is the daemon's business, when it runs is decided
here, where a test can read the schedule without starting anything.

First runs are spread: per-target jobs over the scrape interval (Cloudprober's
``startProbesWithJitter``: many targets never fire in the same instant, plus up to a
tenth of the interval of jitter), sweeps one interval (at most ``sweep.first_run_after``)
apart after start, and NVML sampling right away.

A new plan is brought into force by :func:`plan_changes` (added, removed, changed),
not by removing every job and adding it again: a job whose schedule is the same keeps
its timer, so a reload or a discovery change does not move every job's next run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from tritonwatch.config.schema import Config
from tritonwatch.sweep.schedule import SweepPlan, sweep_plans

SLO_SAVE_INTERVAL_SECONDS = 60.0


class JobKind(StrEnum):
    EVALUATE = "evaluate"
    """SLO burn rates, the advisor, experiment verdicts and the alerts due."""
    SLO_SAVE = "slo_save"
    """The SLO event history, written to the state directory."""
    FILE_DISCOVERY = "discovery"
    """file_sd target files: re-apply the config when one changed."""
    MODEL_DISCOVERY = "model_discovery"
    """Repository indexes of the targets that discover their models."""
    READINESS = "readiness"
    SCRAPE = "scrape"
    """A target's Triton ``/metrics``, statistics and config APIs."""
    NVML = "nvml"
    SWEEP = "sweep"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One periodic job. ``target`` names the target of per-target kinds, ``sweep`` the
    plan of a sweep. ``watched`` jobs (on the schedule board) are checked by
    ``/health``; a sweep may rightly run longer than its interval and is not."""

    job_id: str
    kind: JobKind
    interval: float
    first_delay: float
    watched: bool = True
    target: str = ""
    sweep: SweepPlan | None = None
    rerun_now: bool = False
    """Run at once even where the job already runs (``first_delay`` 0): a target new to
    model discovery has its repository index read now, not an interval later."""

    @property
    def schedule(self) -> tuple[object, ...]:
        """What makes two specs the same job: all but the first delay, which only says
        when a *new* job first runs (a kept job keeps its phase)."""
        return (self.kind, self.interval, self.watched, self.target, self.sweep)

    @property
    def misfire_grace(self) -> int | None:
        """A late run still runs within one interval; a sweep whenever it can."""
        return None if self.kind is JobKind.SWEEP else max(1, int(self.interval))


def job_plan(
    config: Config,
    *,
    discovering: bool,
    models_read: bool,
    nvml: bool,
    jitter: Callable[[float], float],
) -> list[JobSpec]:
    """Every job for ``config``.

    Args:
        discovering: a target this replica owns discovers its models.
        models_read: its repository indexes were read already: the next read is an
            interval away (otherwise right away: a target new to discovery joined).
        nvml: NVML started (no GPU: no sampling job).
        jitter: a random delay in [0, bound) for the bound given (``random.uniform``).
    """
    evaluate, save = config.alerting.evaluation_interval, SLO_SAVE_INTERVAL_SECONDS
    jobs = [
        JobSpec("evaluate", JobKind.EVALUATE, evaluate, evaluate),
        JobSpec("slo_save", JobKind.SLO_SAVE, save, save),
    ]
    if config.discovery.files:
        every = config.discovery.refresh_interval
        jobs.append(JobSpec("discovery", JobKind.FILE_DISCOVERY, every, every, watched=False))
    if discovering:
        every = config.discovery.model_refresh_interval
        delay = every if models_read else 0.0
        kind = JobKind.MODEL_DISCOVERY
        jobs.append(JobSpec("model_discovery", kind, every, delay, rerun_now=not models_read))
    if nvml:
        jobs.append(JobSpec("nvml", JobKind.NVML, config.nvml.interval, 0.0))
    plans = sweep_plans(config)
    for index, plan in enumerate(plans):
        first = min(plan.interval, plan.first_run_after) * (1 + index / len(plans))
        job_id = sweep_job_id(plan.target, plan.model)
        jobs.append(JobSpec(job_id, JobKind.SWEEP, plan.interval, first, watched=False, sweep=plan))
    interval = config.scrape.interval
    names = [target.name for target in config.targets]
    for index, name in enumerate(names):
        offset = interval * index / len(names) + jitter(interval / 10)
        for kind in (JobKind.READINESS, JobKind.SCRAPE):
            jobs.append(JobSpec(f"{kind}:{name}", kind, interval, offset, target=name))
    return jobs


@dataclass(frozen=True, slots=True)
class PlanChanges:
    """What bringing a new plan into force does to the jobs already scheduled."""

    added: tuple[JobSpec, ...]
    """Jobs new to the plan: scheduled at their first delay."""
    removed: tuple[str, ...]
    """Ids of jobs no longer in the plan: removed."""
    changed: tuple[JobSpec, ...]
    """Jobs whose schedule changed (or that must run now): replaced."""
    kept: tuple[str, ...]
    """Ids of jobs whose schedule is the same: left as they are, timer and all."""


def plan_changes(running: Mapping[str, JobSpec], wanted: Iterable[JobSpec]) -> PlanChanges:
    """How to go from the jobs ``running`` (by id) to the plan ``wanted``; pure."""
    wanted_by_id = {spec.job_id: spec for spec in wanted}
    added, changed, kept = [], [], []
    for job_id, spec in wanted_by_id.items():
        before = running.get(job_id)
        if before is None:
            added.append(spec)
        elif spec.rerun_now or before.schedule != spec.schedule:
            changed.append(spec)
        else:
            kept.append(job_id)
    removed = tuple(job_id for job_id in running if job_id not in wanted_by_id)
    return PlanChanges(tuple(added), removed, tuple(changed), tuple(kept))


def sweep_job_id(target: str, model: str) -> str:
    """The id of a model's scheduled sweep job."""
    return f"sweep:{target}:{model}"
