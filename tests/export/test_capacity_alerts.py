"""The exhaustion ticket in process: its condition, Prometheus's ``for:`` hold (restarted
whenever the condition lapses), and what the ticket says."""

from __future__ import annotations

import math

import pytest

from tritonwatch.config.capacity_schema import CapacityConfig
from tritonwatch.export.capacity_alerts import (
    CAPACITY_EXHAUSTION,
    capacity_alert,
    firing,
    held_since,
    human_duration,
    running_out,
)
from tritonwatch.records.capacity_records import CapacityReading, SweptCapacity

SETTINGS = CapacityConfig(alert_for=900.0)


def reading(load: float, forecast: float, exhaustion: float = 3600.0) -> CapacityReading:
    return CapacityReading(
        target="t",
        model="m",
        service="t",
        capacity=SweptCapacity(100.0, 80.0, True, 0.0),
        load=load,
        canary_load=1.0,
        slope=0.01,
        forecast=forecast,
        exhaustion_seconds=exhaustion,
    )


@pytest.mark.parametrize(
    ("load", "forecast", "expected"),
    [
        (70.0, 85.0, True),  # headroom 12.5 % of the open loop's 80, forecast past it
        (70.0, 79.0, False),  # little headroom, but the trend stays under capacity
        (50.0, 200.0, False),  # steep, but 37.5 % headroom
        (81.0, 81.0, True),  # past capacity already
    ],
)
def test_the_condition_needs_little_headroom_and_a_forecast_past_capacity(
    load: float, forecast: float, expected: bool
) -> None:
    """Fails if either half of the rule's condition is dropped, or capacity is not the
    open loop's figure."""
    assert running_out(reading(load, forecast), SETTINGS) is expected


def test_the_hold_restarts_when_the_condition_lapses_and_fires_after_alert_for() -> None:
    """Fails if a lapse does not restart the hold (Prometheus's ``for:``), or the ticket
    fires before ``alert_for`` has passed since the condition last started."""
    since: dict[tuple[str, str], float] = {}
    hot, cool = reading(75.0, 90.0), reading(75.0, 70.0)
    timeline = [(0.0, hot), (600.0, hot), (700.0, cool), (800.0, hot), (1600.0, hot), (1700.0, hot)]
    fired_at = []
    for now, current in timeline:
        since = held_since(since, [current], SETTINGS, now)
        if firing(since, [current], SETTINGS, now):
            fired_at.append(now)
    assert since == {("t", "m"): 800.0}
    assert fired_at == [1700.0]


def test_the_ticket_names_the_model_and_says_when_it_fills() -> None:
    """Fails if the ticket's labels differ from the generated rule's, or its text misreads
    the forecast."""
    alert = capacity_alert(reading(70.0, 90.0, exhaustion=11400.0), "https://runbook")
    assert dict(alert.labels) == {
        "alertname": CAPACITY_EXHAUSTION,
        "severity": "ticket",
        "target": "t",
        "model": "m",
    }
    description = alert.annotations["description"]
    assert "capacity of 80/s (headroom 12%)" in description
    assert "full in 3 h 10 m" in description
    assert alert.annotations["runbook_url"] == "https://runbook#tritoncapacityexhaustion"
    assert "full already" in capacity_alert(reading(90.0, 95.0, 0.0)).annotations["description"]
    flat = capacity_alert(reading(70.0, 90.0, math.inf)).annotations["description"]
    assert "never at this trend" in flat


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(11400.0, "3 h 10 m"), (720.0, "12 m"), (40.4, "40 s"), (90061.0, "1 d 1 h"), (0.2, "0 s")],
)
def test_durations_read_as_a_person_reads_them(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text
