"""The latency breakdown and the bottleneck rule, on hand-made windows with known answers."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from tritonwatch.analysis.breakdown import BottleneckThresholds, find_bottleneck, latency_breakdown
from tritonwatch.records.observations import ModelRates
from tritonwatch.records.target_state import BOTTLENECK_KINDS, STAGES, LatencyBreakdown

MS = 1e-3


def rates(request_ms: float | None, **stage_ms: float | None) -> ModelRates:
    """A window whose averages are the given milliseconds (stages not given are 0 ms)."""

    def seconds(name: str) -> float | None:
        value = stage_ms.get(name, 0.0)
        return None if value is None else value * MS

    return ModelRates(
        model="m",
        version="",
        interval_seconds=15.0,
        counters_reset=False,
        requests_per_second=None if request_ms is None else 10.0,
        inferences_per_second=10.0,
        executions_per_second=10.0,
        failures_per_second=0.0,
        failures_per_second_by_reason=MappingProxyType({}),
        batch_size_average=1.0,
        request_seconds_average=None if request_ms is None else request_ms * MS,
        queue_seconds_average=seconds("queue"),
        compute_input_seconds_average=seconds("compute_input"),
        compute_infer_seconds_average=seconds("compute_infer"),
        compute_output_seconds_average=seconds("compute_output"),
        pending_requests=0.0,
    )


def breakdown(
    canary_ms: float | None = None, request_ms: float = 10.0, **stage_ms: float | None
) -> Any:
    result = latency_breakdown(rates(request_ms, **stage_ms), canary_ms and canary_ms * MS)
    assert result is not None
    return result


def test_breakdown_stages_add_up_to_end_to_end() -> None:
    """Six stages: four timers, the server remainder, and canary minus server."""
    result = breakdown(
        canary_ms=15.0,
        request_ms=10.0,
        queue=2.0,
        compute_input=1.0,
        compute_infer=5.0,
        compute_output=0.5,
    )
    assert result.stages() == pytest.approx(
        {
            "queue": 2 * MS,
            "compute_input": 1 * MS,
            "compute_infer": 5 * MS,
            "compute_output": 0.5 * MS,
            "server_other": 1.5 * MS,
            "network_client": 5 * MS,
        }
    )
    assert list(result.stages()) == list(STAGES)
    assert sum(result.stages().values()) == pytest.approx(15 * MS)
    assert result.server_seconds == pytest.approx(10 * MS)
    assert result.end_to_end_seconds == pytest.approx(15 * MS)


def test_breakdown_clamps_negative_remainders_at_zero() -> None:
    """Stage timers over the request time, or a canary faster than the server: 0, not < 0."""
    result = breakdown(canary_ms=8.0, request_ms=10.0, queue=4.0, compute_infer=7.0)
    assert result.server_other == 0.0
    assert result.network_client == 0.0


def test_breakdown_without_canary_has_no_network_stage() -> None:
    """Without canary timing the network stage is absent, not 0 ms."""
    result = breakdown(request_ms=10.0, compute_infer=9.0)
    assert result.network_client is None
    assert "network_client" not in result.stages()


def test_breakdown_needs_completed_requests() -> None:
    """No request in the window: no breakdown (no traffic is not zero latency)."""
    assert latency_breakdown(rates(None), 0.02) is None


def test_missing_stage_timers_count_as_zero() -> None:
    """All requests served from the cache: the compute averages are None, counted as 0 s."""
    result = breakdown(request_ms=2.0, queue=0.5, compute_input=None, compute_infer=None)
    assert result.compute_infer == 0.0
    assert result.server_other == pytest.approx(1.5 * MS)


@pytest.mark.parametrize(
    ("stage_ms", "canary_ms", "kind"),
    [
        ({"queue": 80.0, "compute_infer": 2.0}, None, "queue-bound"),
        ({"queue": 1.0, "compute_infer": 60.0}, None, "compute-bound"),
        # compute_input + compute_output together: 20 + 25 of 60 ms = 75 %.
        ({"compute_input": 20.0, "compute_infer": 15.0, "compute_output": 25.0}, None, "io-bound"),
        # the server takes 2 ms, the canary sees 42 ms: 40 of 42 ms outside Triton.
        ({"compute_infer": 2.0}, 42.0, "network-bound"),
        # 40 % queue, 40 % compute, 20 % network: nothing over half.
        ({"queue": 20.0, "compute_infer": 20.0}, 50.0, "balanced"),
    ],
)
def test_bottleneck_kinds(stage_ms: dict[str, float], canary_ms: float | None, kind: str) -> None:
    """The group over half of the total wins; no group over half is balanced."""
    request_ms = sum(stage_ms.values())
    result = find_bottleneck(breakdown(canary_ms, request_ms, **stage_ms))
    assert result.kind == kind
    assert sum(result.shares.values()) == pytest.approx(1.0)
    assert kind in BOTTLENECK_KINDS


def test_shares_justify_the_finding() -> None:
    """Shares are of the end-to-end total, and the reason quotes the winning share."""
    result = find_bottleneck(breakdown(100.0, 20.0, queue=5.0, compute_infer=15.0))
    assert result.kind == "network-bound"
    assert result.shares == pytest.approx(
        {
            "queue": 0.05,
            "compute_input": 0.0,
            "compute_infer": 0.15,
            "compute_output": 0.0,
            "server_other": 0.0,
            "network_client": 0.80,
        }
    )
    assert result.reason == "network_client takes 80% of 100.0 ms per request (over 50%)"


def test_exactly_the_dominant_share_is_not_enough() -> None:
    """The share must be strictly over the threshold: 50 % of the time is not dominance."""
    result = find_bottleneck(breakdown(request_ms=10.0, queue=5.0, compute_infer=5.0))
    assert result.kind == "balanced"
    assert result.reason.startswith("no stage dominates: the largest, queue takes 50%")


def test_server_other_belongs_to_no_kind() -> None:
    """Unattributed server time dominating suggests no change: balanced."""
    result = find_bottleneck(breakdown(request_ms=10.0, queue=1.0, compute_infer=2.0))
    assert result.shares["server_other"] == pytest.approx(0.7)
    assert result.kind == "balanced"


def test_a_dominant_but_small_stage_is_balanced() -> None:
    """4.4 ms of compute in a 50 ms budget is not worth a finding: under 20 % of it."""
    thresholds = BottleneckThresholds.for_budget(0.050)
    assert thresholds.dominant_share == 0.5
    assert thresholds.min_stage_seconds == pytest.approx(0.010)
    small = breakdown(request_ms=6.5, queue=2.0, compute_infer=4.4)
    result = find_bottleneck(small, thresholds)
    assert result.kind == "balanced"
    assert result.reason == (
        "compute_infer takes 68% of 6.5 ms per request, but 4.4 ms is under the 10.0 ms "
        "worth acting on"
    )
    assert find_bottleneck(small).kind == "compute-bound"  # no floor by default


def test_a_stricter_dominant_share() -> None:
    """A stricter dominant share turns a 70 % compute window from compute-bound to balanced."""
    window = breakdown(request_ms=10.0, queue=2.0, compute_infer=7.0, compute_output=1.0)
    assert find_bottleneck(window).kind == "compute-bound"
    assert find_bottleneck(window, BottleneckThresholds(dominant_share=0.75)).kind == "balanced"


def test_no_time_at_all_is_balanced() -> None:
    """An all-zero window is balanced with zero shares, not a division by zero."""
    empty = LatencyBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, None, 0.0, None)
    result = find_bottleneck(empty)
    assert result.kind == "balanced"
    assert set(result.shares.values()) == {0.0}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dominant_share": 0.4}, "dominant_share must be in [0.5, 1), got: 0.4"),
        ({"dominant_share": 1.0}, "dominant_share must be in [0.5, 1), got: 1.0"),
        ({"min_stage_seconds": -1.0}, "min_stage_seconds must not be negative, got: -1.0"),
    ],
)
def test_thresholds_are_validated(fields: dict[str, float], message: str) -> None:
    """Below half, two groups could both 'dominate'; the messages name field and value."""
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        BottleneckThresholds(**fields)
