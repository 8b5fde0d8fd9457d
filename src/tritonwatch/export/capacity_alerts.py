"""``TritonCapacityExhaustion`` (ticket), evaluated in process as the generated rule does.

The condition, in the node-exporter mixin's style (``NodeFilesystemSpaceFillingUp``:
little left *and* a linear forecast that runs out): the headroom is under
``capacity.headroom_alert`` and the load's least-squares trend, taken
``capacity.forecast_horizon`` ahead, is at or past capacity; held for
``capacity.alert_for``, as Prometheus holds a rule ``for:`` (the hold starts at the
first evaluation that sees the condition and restarts whenever one does not). The
labels are the rule's (``target``, ``model``, severity ticket), so Alertmanager keeps
one alert whichever path raised it first
(:func:`~tritonwatch.commands.rules.capacity.capacity_group`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.export.alerts import DEFAULT_RUNBOOK_BASE, AlertSpec
from tritonwatch.records.capacity_records import CapacityReading

CAPACITY_EXHAUSTION = "TritonCapacityExhaustion"
TargetModel = tuple[str, str]


def running_out(reading: CapacityReading, settings: CapacityConfig) -> bool:
    """The rule's condition on one reading: headroom under the threshold and the
    forecast at the horizon at or past capacity."""
    capacity, headroom = reading.capacity_per_second, reading.headroom
    if capacity is None or headroom is None or reading.forecast is None:
        return False
    return headroom < settings.headroom_alert and reading.forecast >= capacity


def held_since(
    previous: Mapping[TargetModel, float],
    readings: Iterable[CapacityReading],
    settings: CapacityConfig,
    now: float,
) -> dict[TargetModel, float]:
    """Since when each model's condition has held, evaluation by evaluation: kept while
    it holds, started now when it starts, dropped when it does not hold."""
    return {
        (r.target, r.model): previous.get((r.target, r.model), now)
        for r in readings
        if running_out(r, settings)
    }


def firing(
    since: Mapping[TargetModel, float],
    readings: Iterable[CapacityReading],
    settings: CapacityConfig,
    now: float,
) -> list[CapacityReading]:
    """The readings whose condition has held for ``capacity.alert_for``."""
    return [
        r
        for r in readings
        if (r.target, r.model) in since and now - since[(r.target, r.model)] >= settings.alert_for
    ]


def human_duration(seconds: float) -> str:
    """``3 h 10 m``, ``12 m``, ``40 s``: a forecast as a person reads it (two units at most)."""
    whole = max(round(seconds), 0)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{value} {unit}" for value, unit in parts if value][:2]
    return " ".join(shown) or "0 s"


def _duration(seconds: float) -> str:
    return "already" if seconds <= 0 else f"in {human_duration(seconds)}"


def capacity_alert(reading: CapacityReading, runbook_base: str = DEFAULT_RUNBOOK_BASE) -> AlertSpec:
    """The ticket for one model running out of capacity."""
    capacity = reading.capacity_per_second or 0.0
    headroom = reading.headroom or 0.0
    full = reading.exhaustion_seconds
    when = "never at this trend" if math.isinf(full) else f"full {_duration(full)}"
    labels = {
        "alertname": CAPACITY_EXHAUSTION,
        "severity": "ticket",
        "target": reading.target,
        "model": reading.model,
    }
    annotations = {
        "summary": f"{reading.model} on {reading.target} is running out of capacity",
        "description": f"Load {reading.load or 0.0:.3g}/s against a capacity of "
        f"{capacity:.3g}/s (headroom {headroom:.0%}); at the current trend {when}. "
        "Add a replica or an instance before the latency SLO pages.",
        "runbook_url": f"{runbook_base}#{CAPACITY_EXHAUSTION.lower()}",
    }
    return AlertSpec(MappingProxyType(labels), MappingProxyType(annotations))
