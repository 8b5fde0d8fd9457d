"""The ``capacity`` section and a target's ``price``: capacity, headroom and cost
(docs/guides/capacity.md).

A model's capacity is the highest throughput whose p95 stayed inside its latency budget
in the last scheduled sweep (checked with an open-loop step); its load comes from
Triton's ``nv_inference_count``. This section says how the load's trend is fitted, when
the exhaustion ticket fires, and how the desired replicas of a service are counted.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, NonNegativeInt, PositiveFloat, model_validator

from tritonwatch.config.section import Section
from tritonwatch.config.types import Duration, Ratio


class CapacityConfig(Section):
    """How capacity, headroom and the exhaustion forecast are judged."""

    trend_window: Duration = 3600.0
    """The load samples the trend is fitted to by least squares (the window of the
    generated rule's ``predict_linear``): longer is steadier under noise, slower to see
    a new trend."""
    forecast_horizon: Duration = 4 * 3600.0
    """The exhaustion ticket fires when load is forecast to reach capacity within this."""
    headroom_alert: Ratio = 0.2
    """…and the headroom (1 − load / capacity) is under this."""
    alert_for: Duration = 15 * 60.0
    """How long both must hold before the ticket fires (the rule's ``for:``)."""
    target_utilisation: Ratio = Field(default=0.8, gt=0)
    """The share of one replica's capacity the desired replicas are counted at."""
    spare_replicas: NonNegativeInt = 0
    """Replicas added to the desired count (a failure domain's worth, say)."""
    stale_drift: Ratio = Field(default=0.2, gt=0)
    """The capacity goes stale when the live per-request compute time differs from the
    sweep's at the same load by more than this share; a scheduled sweep is then
    brought forward."""
    open_loop_check: bool = True
    """Check a sweep's closed-loop capacity with open-loop request-rate steps (what
    production traffic is) and report the open-loop figure."""


class TargetPrice(Section):
    """What one of the target's GPUs, or the whole node, costs per hour; one of the two.

    The cost exported is in this price's currency, whatever it is."""

    per_gpu_hour: PositiveFloat | None = None
    """Price of one GPU-hour; multiplied by the GPUs Triton reports."""
    per_node_hour: PositiveFloat | None = None
    """Price of the whole server (a CPU node, or a GPU node priced as one)."""

    @model_validator(mode="after")
    def _one_price(self) -> Self:
        if (self.per_gpu_hour is None) == (self.per_node_hour is None):
            raise ValueError("give exactly one of per_gpu_hour and per_node_hour")
        return self
