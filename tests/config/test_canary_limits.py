"""canary.limits: sizes written as bytes or with a binary unit, each bounded, and a bad
value named with its file, field and value (docs/configuration: canary.limits)."""

from __future__ import annotations

import pytest

from tritonwatch.config import ConfigError, parse_config
from tritonwatch.probe.canary.plans import canary_plans
from tritonwatch.wire.limits import AnswerLimits

TARGET = "targets:\n  - name: t\n    url: http://127.0.0.1:8000\n    models: [{name: m}]\n"


def _limits(text: str) -> str:
    return TARGET + "canary:\n  limits:\n" + text


def test_sizes_read_as_bytes_or_binary_units() -> None:
    """Breaks if 16MiB or 64KiB is not the bytes it says, or a plain number is refused."""
    config = parse_config(
        _limits("    max_answer_bytes: 8MiB\n    max_header_bytes: 65536\n"
                "    http2_window: 4 MiB\n"),
        "limits.yaml",
    )  # fmt: skip
    limits = config.canary.limits
    assert (limits.max_answer_bytes, limits.max_header_bytes) == (8 << 20, 65536)
    assert limits.http2_window == 4 << 20


def test_the_plans_carry_each_models_limits() -> None:
    """Breaks if the canary's readers do not get canary.limits (global, or a model's
    own override field by field)."""
    text = (
        "targets:\n  - name: t\n    url: http://127.0.0.1:8000\n    models:\n"
        "      - name: a\n      - name: b\n        canary: {limits: {max_answer_bytes: 1MiB}}\n"
        "canary:\n  limits: {max_header_bytes: 8KiB}\n"
    )
    plans = {plan.model: plan for plan in canary_plans(parse_config(text, "limits.yaml"))}
    assert plans["a"].limits == AnswerLimits(16 << 20, 8 << 10, 1 << 20)
    assert plans["b"].limits == AnswerLimits(1 << 20, 8 << 10, 1 << 20)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_answer_bytes: 2GiB", "canary.limits.max_answer_bytes: must be between 64KiB and "
         "1GiB, got: '2GiB'"),
        ("max_answer_bytes: 1000", "canary.limits.max_answer_bytes: must be between 64KiB and "
         "1GiB, got: 1000"),
        ("max_header_bytes: lots", "canary.limits.max_header_bytes: must be a size in bytes like "
         "65536, 64KiB, 16MiB or 1GiB, got: 'lots'"),
        ("http2_window: 100", "canary.limits.http2_window: must be between 65535 and "
         "2147483647, got: 100"),
        ("max_answer_bytes: 1.5MiB", "canary.limits.max_answer_bytes: must be a size in bytes "
         "like 65536, 64KiB, 16MiB or 1GiB, got: '1.5MiB'"),
        ("window: 1MiB", "canary.limits.window: unknown key"),
    ],
)  # fmt: skip
def test_a_bad_limit_is_named_with_file_field_and_value(line: str, message: str) -> None:
    """Breaks if a limit out of range, not a size, or misspelt is taken, or its error
    does not name the file, the field and the value."""
    with pytest.raises(ConfigError) as caught:
        parse_config(_limits(f"    {line}\n"), "limits.yaml")
    assert str(caught.value).startswith(f"limits.yaml: {message}")
