"""job_plan: what the daemon runs when, read without starting anything."""

from __future__ import annotations

import pytest

from tritonwatch.config.schema import Config
from tritonwatch.runtime.job_plan import JobKind, JobSpec, job_plan, plan_changes


def config(**extra: object) -> Config:
    return Config.model_validate(
        {
            "targets": [
                {"name": name, "url": f"http://127.0.0.1:{port}", "models": [{"name": "m"}]}
                for name, port in (("a", 8000), ("b", 8001), ("c", 8002), ("d", 8003))
            ],
            "scrape": {"interval": "20s"},
            "alerting": {"evaluation_interval": "30s"},
            **extra,
        }
    )


def by_id(plan: list[JobSpec]) -> dict[str, JobSpec]:
    ids = [spec.job_id for spec in plan]
    assert len(ids) == len(set(ids)), ids  # APScheduler refuses a duplicate id
    return {spec.job_id: spec for spec in plan}


def test_targets_are_spread_over_the_interval_with_bounded_jitter() -> None:
    """Breaks if per-target first runs bunch up, or readiness and scrape stop sharing one."""
    bounds: list[float] = []

    def jitter(bound: float) -> float:
        bounds.append(bound)
        return bound / 2

    plan = by_id(job_plan(config(), discovering=False, models_read=True, nvml=False, jitter=jitter))
    assert bounds == [2.0] * 4  # a tenth of the 20 s interval, once per target
    for index, name in enumerate("abcd"):
        readiness, scrape = plan[f"readiness:{name}"], plan[f"scrape:{name}"]
        assert readiness.first_delay == scrape.first_delay == pytest.approx(5.0 * index + 1.0)
        assert (readiness.kind, readiness.target, readiness.interval) == (
            JobKind.READINESS,
            name,
            20,
        )
        assert (scrape.kind, scrape.target, scrape.watched) == (JobKind.SCRAPE, name, True)
        assert readiness.misfire_grace == 20


def test_the_always_on_jobs_and_nothing_unasked() -> None:
    """Breaks if evaluation or saving moves, or a discovery/NVML/sweep job appears unasked."""
    plan = by_id(job_plan(config(), discovering=False, models_read=True, nvml=False,
                          jitter=lambda bound: 0.0))  # fmt: skip
    others = {k: v for k, v in plan.items() if not k.startswith(("readiness:", "scrape:"))}
    assert {k: (v.kind, v.interval, v.first_delay, v.watched) for k, v in others.items()} == {
        "evaluate": (JobKind.EVALUATE, 30.0, 30.0, True),
        "slo_save": (JobKind.SLO_SAVE, 60.0, 60.0, True),
    }


def test_discovery_nvml_and_sweeps_when_asked() -> None:
    """Breaks if discovery reads late for a new target, or a sweep is checked by /health."""
    sweeping = config(
        discovery={"files": ["targets.json"], "refresh_interval": "45s"},
        sweep={"enabled": True, "interval": "10m"},
    )
    fresh = by_id(job_plan(sweeping, discovering=True, models_read=False, nvml=True,
                           jitter=lambda bound: 0.0))  # fmt: skip
    assert (fresh["discovery"].interval, fresh["discovery"].first_delay) == (45.0, 45.0)
    assert not fresh["discovery"].watched
    assert fresh["model_discovery"].first_delay == 0.0  # a target not read yet: now
    assert (fresh["nvml"].kind, fresh["nvml"].first_delay) == (JobKind.NVML, 0.0)
    sweeps = [spec for spec in fresh.values() if spec.kind is JobKind.SWEEP]
    assert [spec.job_id for spec in sweeps] == [f"sweep:{name}:m" for name in "abcd"]
    assert [spec.first_delay for spec in sweeps] == [60.0, 75.0, 90.0, 105.0]
    assert all(not s.watched and s.misfire_grace is None and s.sweep for s in sweeps)
    read = by_id(job_plan(sweeping, discovering=True, models_read=True, nvml=True,
                          jitter=lambda bound: 0.0))  # fmt: skip
    assert read["model_discovery"].first_delay == 60.0  # the default model_refresh_interval


def test_the_first_sweeps_follow_first_run_after() -> None:
    """Breaks if ``sweep.first_run_after`` does not set when the first sweeps run (one
    such delay apart), or an interval shorter than it does not win."""
    soon = config(sweep={"enabled": True, "interval": "10m", "first_run_after": "2s"})
    plan = job_plan(soon, discovering=False, models_read=True, nvml=False, jitter=lambda b: 0.0)
    firsts = [spec.first_delay for spec in plan if spec.kind is JobKind.SWEEP]
    assert firsts == [2.0, 2.5, 3.0, 3.5]
    short = config(sweep={"enabled": True, "interval": "1s", "first_run_after": "2s"})
    plan = job_plan(short, discovering=False, models_read=True, nvml=False, jitter=lambda b: 0.0)
    assert next(spec.first_delay for spec in plan if spec.kind is JobKind.SWEEP) == 1.0


def test_plan_changes_keep_what_is_the_same_and_touch_only_the_rest() -> None:
    """Jobs are reconciled against the plan, not removed and re-added. Breaks if a job
    whose schedule is the same is replaced (its timer reset) because only its jittered
    first delay differs, if a changed interval, a new or a gone target is missed, or if
    a target new to model discovery is not read again at once."""

    def plan(
        cfg: Config, jitter: float, *, models_read: bool = True, nvml: bool = False
    ) -> list[JobSpec]:
        return job_plan(
            cfg,
            discovering=True,
            models_read=models_read,
            nvml=nvml,
            jitter=lambda bound: bound * jitter,
        )

    running = {spec.job_id: spec for spec in plan(config(), 0.0)}
    same = plan_changes(running, plan(config(), 0.5))
    assert (same.added, same.removed, same.changed) == ((), (), ())
    assert set(same.kept) == set(running)

    moved = config(scrape={"interval": "40s"})
    moved = moved.model_copy(update={"targets": moved.targets[:3]})
    changes = plan_changes(running, plan(moved, 0.0, models_read=False, nvml=True))
    assert [spec.job_id for spec in changes.added] == ["nvml"]
    assert set(changes.removed) == {"readiness:d", "scrape:d"}
    assert {spec.job_id for spec in changes.changed} == {
        "model_discovery",  # not read yet: now, though its interval is the same
        *(f"{kind}:{name}" for kind in ("readiness", "scrape") for name in "abc"),
    }
    assert set(changes.kept) == {"evaluate", "slo_save"}
