"""``tritonwatch check-config``: exit 0 with a summary, or exit 2 with the exact problem."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from config.test_invalid_configs import EXPECTED
from support import REPO, TRITONWATCH

pytestmark = pytest.mark.real

INVALID = REPO / "tests" / "config" / "invalid"


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRITONWATCH, "check-config", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=30,
    )


def test_valid_config_prints_one_line_summary(tmp_path: Path) -> None:
    """A valid config exits 0 with one summary line counting targets, models and SLOs."""
    config = tmp_path / "ok.yaml"
    config.write_text(
        "targets:\n"
        "  - {name: a, url: http://127.0.0.1:8000, models: [{name: m1}, {name: m2}]}\n"
        "  - {name: b, url: grpc://127.0.0.1:8001, models: [{name: m3}]}\n"
    )
    result = _check(str(config))
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == f"ok: {config}: 2 targets, 3 models, 6 SLOs"
    assert result.stderr == ""


def test_check_config_prints_the_plan_and_that_models_are_discovered_at_run_time(
    tmp_path: Path,
) -> None:
    """No server is asked: a discovering target says so, a listed model shows its SLOs."""
    config = tmp_path / "ok.yaml"
    config.write_text(
        "targets:\n"
        "  - name: a\n"
        "    url: grpc://127.0.0.1:1\n"
        "    models:\n"
        "      include: ^bert\n"
        "      listed: [{name: m1, slo: {latency: {threshold: 20ms}}}]\n"
    )
    result = _check(str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"ok: {config}: 1 target, 1 model, 2 SLOs; models of 1 target discovered at run time",
        "target a: grpc://127.0.0.1:1 (grpc), metrics http://127.0.0.1:8002/metrics",
        "  models: every READY model (include '^bert'), discovered at run time",
        "  model m1: canary grpc, 1/s",
        "    SLO latency: 95% under 20ms; availability: 99.9%; period 28d",
    ]


def test_invalid_config_exits_2_with_the_message_and_no_traceback() -> None:
    """An invalid config exits 2 with the exact one-line message and no traceback."""
    bad = INVALID / "threshold_zero.yaml"
    result = _check(str(bad))
    assert result.returncode == 2
    assert result.stderr == (
        f"{bad}: targets[0].models[1].slo.latency.threshold: must be positive, got: '0ms'\n"
    )
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_config_from_environment_variable() -> None:
    """check-config reads its config path from TRITONWATCH_CONFIG."""
    example = REPO / "examples" / "demo.yaml"
    result = _check(env={"TRITONWATCH_CONFIG": str(example)})
    assert result.returncode == 0
    assert result.stdout.startswith(f"ok: {example}: 1 target")


def test_run_with_invalid_config_prints_the_same_message_and_exits_2() -> None:
    """`run` on an invalid config exits 2 with exactly check-config's message."""
    bad = INVALID / "url_bad_scheme.yaml"
    checked = _check(str(bad))
    ran = subprocess.run(
        [TRITONWATCH, "run", "--config", str(bad), "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode == 2
    assert ran.stderr == checked.stderr
    assert "Traceback" not in ran.stderr


def test_check_config_counts_and_prints_ttft_and_itl_slos(tmp_path: Path) -> None:
    """Breaks if check-config counts only latency/availability SLOs or hides TTFT/ITL ones."""
    config = tmp_path / "llm.yaml"
    config.write_text(
        "slo: {ttft: {threshold: 500ms}}\n"
        "targets:\n"
        "  - name: a\n"
        "    url: http://127.0.0.1:1\n"
        "    models:\n"
        "      - {name: gen, slo: {itl: {threshold: 50ms, objective: 0.9}}}\n"
        "      - {name: plain, slo: {ttft: null}}\n"
    )
    result = _check(str(config))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"ok: {config}: 1 target, 2 models, 6 SLOs"
    assert lines[2:] == [
        "  model gen: canary http, 1/s",
        "    SLO latency: 95% under 50ms; availability: 99.9%; period 28d",
        "    SLO TTFT: 99% under 500ms; ITL: 90% under 50ms",  # 99 %: the TTFT default
        "  model plain: canary http, 1/s",
        "    SLO latency: 95% under 50ms; availability: 99.9%; period 28d",
    ]


STREAMING_MISTAKES = sorted(
    name
    for name in EXPECTED
    if name.startswith(("openai_", "stream_", "ttft_", "itl_")) or "stream_timeout" in name
)


@pytest.mark.parametrize("name", STREAMING_MISTAKES)
def test_streaming_config_mistakes_exit_2_naming_file_field_and_value(name: str) -> None:
    """Each canary.stream / openai / TTFT-ITL check reaches the CLI as exit 2 and one line."""
    bad = INVALID / name
    result = _check(str(bad))
    assert result.returncode == 2
    assert result.stderr == f"{bad}: {EXPECTED[name]}\n"
    assert result.stdout == ""


@pytest.mark.parametrize(
    "example", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_config_is_valid(example: Path) -> None:
    """Breaks if a file in examples/ drifts from the schema (check-config exits 0)."""
    result = _check(str(example))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok: {example}: ")


def test_check_config_shows_a_streams_slos_and_warns_of_a_latency_shorter_than_it(
    tmp_path: Path,
) -> None:
    """Breaks if a model that surely streams is shown with the whole-request latency SLO
    it does not get, without its default TTFT/ITL SLOs, or if a written latency shorter
    than max_tokens × the ITL threshold passes without a warning (or fails the check)."""
    config = tmp_path / "llm.yaml"
    config.write_text(
        "targets:\n"
        "  - name: a\n"
        "    url: http://127.0.0.1:1\n"
        "    models:\n"
        "      - {name: llm, canary: {stream: {mode: on}}}\n"
        "      - {name: gen, canary: {stream: {mode: on}}, slo: {latency: {threshold: 1s}}}\n"
        "      - name: short\n"
        "        canary: {stream: {mode: on, max_tokens: 4}}\n"
        "        slo: {latency: {threshold: 1s}}\n"
    )
    result = _check(str(config))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"warning: {config}: targets[0].models[1].slo.latency.threshold: is shorter than a "
        "stream the canary asks for: 16 tokens (canary.stream.max_tokens) × the 200ms ITL "
        "threshold = 3200ms, so streams whose every gap meets the ITL SLO still miss it; "
        "raise it, lower max_tokens, or leave slo.latency out (TTFT and ITL judge a "
        "stream), got: '1s'\n"
    )  # short: 4 tokens × 200 ms = 800 ms fit in its 1 s
    lines = result.stdout.splitlines()
    assert lines[0] == f"ok: {config}: 1 target, 3 models, 11 SLOs"
    assert lines[2:6] == [
        "  model llm: canary http, 1/s",
        "    SLO availability: 99.9%; period 28d",
        "    SLO TTFT: 99% under 2s; ITL: 99% under 200ms",
        "  model gen: canary http, 1/s",
    ]
    assert lines[6] == "    SLO latency: 95% under 1s; availability: 99.9%; period 28d"
