"""``canary.max_total_rate``: the daemon's canaries scaled down together past a fleet-wide
budget, after the per-target caps; logged, exported, and set only globally."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from tritonwatch.config import ConfigError, parse_config
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.probe.canary.plans import canary_plans
from tritonwatch.state.canary_board import CanaryBoard


def _fleet(models_per_target: dict[str, int], extra: str = "") -> str:
    """A config with these targets, each with that many models at the default 1/s."""
    lines = [extra, "slo: {latency: {threshold: 100ms}}", "targets:"]
    for port, (target, count) in enumerate(models_per_target.items(), start=1):
        names = ", ".join(f"{{name: {target}-m{m}}}" for m in range(count))
        lines.append(f"  - {{name: {target}, url: 'http://127.0.0.1:{port}', models: [{names}]}}")
    return "\n".join(lines) + "\n"


def test_a_thousand_models_share_the_default_budget_evenly() -> None:
    """Fails if 1 000 models at 1/s are not held to 100/s together (0.1/s each), if the
    asked rate is lost, or if the scaling is not logged."""
    with capture_logs() as logs:
        plans = canary_plans(parse_config(_fleet({f"t{t}": 50 for t in range(20)}), "fleet.yaml"))
    assert len(plans) == 1000
    assert {(p.asked_rate, round(p.rate, 9)) for p in plans} == {(1.0, 0.1)}
    assert sum(p.rate for p in plans) == pytest.approx(100.0)
    (applied,) = [e for e in logs if e["event"] == "canary_budget_applied"]
    assert (applied["asked_rate"], applied["scale"], applied["models"]) == (1000.0, 0.1, 1000)


def test_the_budget_scales_after_the_per_target_caps_and_leaves_a_small_fleet_alone() -> None:
    """Fails if the budget is taken before the per-target caps (a capped target would be
    scaled twice over), or touches canaries within it."""
    # t0 asks 60 × 1/s, capped to 50/s; u0..u2 ask 30/s each: 140/s asked, 100/s kept.
    config = parse_config(_fleet({"t0": 60, "u0": 30, "u1": 30, "u2": 30}), "caps.yaml")
    plans = canary_plans(config)
    totals = {t: sum(p.rate for p in plans if p.target == t) for t in ("t0", "u0", "u1", "u2")}
    assert totals == pytest.approx(
        {"t0": 50 * 100 / 140, "u0": 30 * 100 / 140, "u1": 30 * 100 / 140, "u2": 30 * 100 / 140}
    )
    small = canary_plans(parse_config(_fleet({"a": 3, "b": 3}), "small.yaml"))
    assert {(p.asked_rate, p.rate) for p in small} == {(1.0, 1.0)}


def test_a_model_cannot_set_the_fleet_budget() -> None:
    """Fails if a model's own canary section may set the daemon-wide budget silently."""
    text = (
        "targets:\n"
        "  - {name: a, url: 'http://127.0.0.1:1', models: [{name: m, canary: {max_total_rate: 5/s}}]}\n"
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "model-budget.yaml")
    assert "targets[0].models[0].canary.max_total_rate" in str(raised.value)
    assert "global canary section" in str(raised.value)


def test_the_budget_is_exported_as_the_totals_and_their_ratio() -> None:
    """Fails if /metrics does not show the asked and planned totals and the scale."""
    board = CanaryBoard()
    board.set_rates(1000.0, 100.0)
    registry = CollectorRegistry()
    registry.register(CanaryCollector(board, clock=lambda: 0.0))
    text = generate_latest(registry).decode()
    assert 'tritonwatch_canary_total_rate_requests_per_second{rate="asked"} 1000.0' in text
    assert 'tritonwatch_canary_total_rate_requests_per_second{rate="planned"} 100.0' in text
    assert "tritonwatch_canary_rate_scale_ratio 0.1" in text
