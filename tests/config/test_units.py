"""Durations and rates parse the way users write them, and nothing else gets through."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritonwatch.config.units import format_duration, parse_duration, parse_rate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("28d", 28 * 86400.0),
        ("1.5s", 1.5),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_durations(text: str | float, seconds: float) -> None:
    """Durations parse as users write them: ms, s, m, h, d, compounds, decimals, bare numbers."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "fast", "5", "5 s", "s5", "-5s", "1h-30m", "5ms5", True])
def test_bad_durations_are_refused(text: object) -> None:
    """Unitless strings, spaces, signs, trailing digits and booleans are not durations."""
    with pytest.raises(ValueError, match="must be a duration like 500ms"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("2/s", 2.0),
        ("30/m", 0.5),
        ("100/h", 100 / 3600),
        ("1/ms", 1000.0),
        (4, 4.0),
        ("0.5 / s", 0.5),
    ],
)
def test_rates(text: str | float, per_second: float) -> None:
    """Rates parse per s, m, h and ms, with spaces around the slash or as bare numbers."""
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize("text", ["2", "2/sec", "/s", "2 per second", None, False])
def test_bad_rates_are_refused(text: object) -> None:
    """A rate without a unit, with a spelled-out unit, or of the wrong type is refused."""
    with pytest.raises(ValueError, match="must be a rate like 2/s"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.5, "500ms"), (2.0, "2s"), (300.0, "5m"), (7200.0, "2h"), (90.0, "90s")]
)
def test_format_duration(seconds: float, text: str) -> None:
    """Durations print in the largest whole unit, falling back to seconds (90s, not 1.5m)."""
    assert format_duration(seconds) == text


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["ms", "s", "m", "h", "d"]))
def test_format_then_parse_round_trips(number: int, unit: str) -> None:
    """Messages show durations in a form the parser reads back to the same value."""
    seconds = parse_duration(f"{number}{unit}")
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)
