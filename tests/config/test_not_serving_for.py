"""``alerting.not_serving_for``: a duration, a minute unless set, refused (exit 2, file,
field and value named) when it is not a positive duration."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonwatch.analysis.serving import HOLD_SECONDS
from tritonwatch.commands.cli import main
from tritonwatch.config import ConfigError, parse_config

TARGETS = "targets:\n  - {name: prod, url: http://127.0.0.1:8000, models: [{name: simple}]}\n"
BAD = Path(__file__).parent / "invalid" / "not_serving_for_zero.yaml"


def test_the_default_is_the_minute_the_server_down_hold_waits() -> None:
    """Breaks if leaving it out no longer waits the minute ``TritonServerDown`` waits."""
    assert parse_config(TARGETS, "c.yaml").alerting.not_serving_for == HOLD_SECONDS == 60.0


@pytest.mark.parametrize(("written", "seconds"), [("5s", 5.0), ("1m30s", 90.0), (2, 2.0)])
def test_it_is_read_as_a_duration(written: object, seconds: float) -> None:
    """Breaks if the hold is not read like every other duration of the config."""
    config = parse_config(f"alerting: {{not_serving_for: {written}}}\n" + TARGETS, "c.yaml")
    assert config.alerting.not_serving_for == seconds


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ("soon", "must be a duration like 500ms, 2s, 5m, 1h or 1h30m, got: 'soon'"),
        ("-5s", "must be a duration like 500ms, 2s, 5m, 1h or 1h30m, got: '-5s'"),
        ("0s", "must be positive, got: '0s'"),
    ],
)
def test_a_bad_hold_names_the_field_and_the_value(written: str, problem: str) -> None:
    """Breaks if a hold that is no positive duration loads, or its message does not
    name the file, the field and what was written."""
    with pytest.raises(ConfigError) as caught:
        parse_config(f"alerting: {{not_serving_for: {written}}}\n" + TARGETS, "c.yaml")
    assert str(caught.value) == f"c.yaml: alerting.not_serving_for: {problem}"


def test_check_config_exits_2_on_a_bad_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """Breaks if ``tritonwatch check-config`` does not refuse the file with exit 2 and
    the one-line message, as it refuses every other config error."""
    assert main(["check-config", str(BAD)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"{BAD}: alerting.not_serving_for: must be positive, got: '0s'\n"
    assert captured.out == ""
