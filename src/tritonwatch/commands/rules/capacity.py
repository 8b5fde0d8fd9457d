"""The generated capacity rule: the group ``tritonwatch-capacity``.

``TritonCapacityExhaustion`` (ticket), in the node-exporter mixin's style (its
``NodeFilesystemSpaceFillingUp``: little left *and* a ``predict_linear`` forecast that
runs out): the headroom the daemon exports is under ``capacity.headroom_alert`` and
``predict_linear`` of the exported load over ``capacity.trend_window``, taken
``capacity.forecast_horizon`` ahead, reaches the exported capacity; held ``for:``
``capacity.alert_for``. The forecast is the left operand, so ``$value`` is the load
forecast at the horizon. The daemon evaluates the same condition on the same samples
(:mod:`tritonwatch.export.capacity_alerts`): the same least squares, the same labels.
"""

from __future__ import annotations

from typing import Any

from tritonwatch.commands.rules.health import alert_rule, prometheus_duration
from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.export.alerts import DEFAULT_RUNBOOK_BASE
from tritonwatch.export.capacity_alerts import CAPACITY_EXHAUSTION
from tritonwatch.export.capacity_metrics import CAPACITY, HEADROOM, LOAD

CAPACITY_GROUP = "tritonwatch-capacity"


def _by_model(expr: str) -> str:
    return f"max by (target, model) ({expr})"


def capacity_exhaustion_rule(
    settings: CapacityConfig, runbook_base: str = DEFAULT_RUNBOOK_BASE
) -> dict[str, Any]:
    """The ticket rule for ``settings`` (the config's ``capacity`` section)."""
    window = prometheus_duration(settings.trend_window)
    horizon = round(settings.forecast_horizon)
    forecast = _by_model(f"predict_linear({LOAD}[{window}], {horizon})")
    return alert_rule(
        CAPACITY_EXHAUSTION,
        expr=f"{forecast}\n>= on (target, model)\n{_by_model(CAPACITY)}\n"
        f"and on (target, model)\n{_by_model(HEADROOM)} < {settings.headroom_alert:g}",
        held_for=prometheus_duration(settings.alert_for),
        severity="ticket",
        summary="{{ $labels.model }} on {{ $labels.target }} is running out of capacity",
        description="Headroom is under "
        f"{settings.headroom_alert:.0%} and the load's trend over the last {window} "
        '(forecast {{ $value | printf "%.3g" }}/s) reaches capacity within '
        f"{prometheus_duration(settings.forecast_horizon)}. Add a replica or an instance "
        "before the latency SLO pages.",
        runbook_base=runbook_base,
    )


def capacity_group(
    settings: CapacityConfig, runbook_base: str = DEFAULT_RUNBOOK_BASE
) -> dict[str, Any]:
    """The capacity group (one rule, for every target and model)."""
    return {"name": CAPACITY_GROUP, "rules": [capacity_exhaustion_rule(settings, runbook_base)]}
