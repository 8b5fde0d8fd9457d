"""`tritonwatch sweep` on real Triton 2.51's decoupled llm_stream: the CLI finds the model
decoupled and streams from it, and the per-level TTFT, ITL and tokens/s it writes agree
with the model's parameters and with each other."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from real_triton import RealTriton
from support import TRITONWATCH

pytestmark = pytest.mark.real

MODEL = "llm_stream"
MAX_TOKENS = 6
FIRST_TOKEN_S = 0.020
TOKEN_GAP_S = 0.005
"""tests/triton_models/llm_stream/config.pbtxt: its first token after 20 ms, then one
every 5 ms (sleeps: no stream can be faster)."""


def _sweep(url: str, tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = tmp_path / "sweep.json"
    result = subprocess.run(
        [TRITONWATCH, "sweep", "--url", url, "--model", MODEL, "--measurement-interval", "1s",
         "--max-windows", "3", "--max-tokens", str(MAX_TOKENS), "--prompt-words", "4",
         "--json", str(out), "--csv", str(tmp_path / "sweep.csv"),
         "--plot", str(tmp_path / "sweep.svg"), *flags],
        capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "160"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "streaming (judged on output tokens/s and" in result.stdout
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _assert_levels(data: dict[str, Any], levels: list[int]) -> None:
    """Every level streamed without errors, at the model's pace, tokens/s ≈ requests/s ×
    tokens per stream."""
    steps = data["steps"]
    assert [step["level"] for step in steps] == levels
    for step in steps:
        assert step["requests"] > 0 and step["errors"] == 0, step
        ratio = step["output_tokens_per_second"] / (step["requests_per_second"] * MAX_TOKENS)
        assert 0.5 <= ratio <= 2.0, step
        assert step["ttft"]["p50"] >= FIRST_TOKEN_S, step["ttft"]
        assert step["itl"]["p50"] >= TOKEN_GAP_S * 0.5, step["itl"]  # reads can coalesce
        assert step["ttft"]["p50"] <= step["latency"]["p50"]
        assert step["server"] is not None and step["server"]["requests"] > 0


def test_cli_sweeps_llm_stream_over_generate_stream(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Breaks if the CLI sends the decoupled model plain infers, or its JSON loses or
    miscounts a level's TTFT, ITL or output tokens/s."""
    data = _sweep(real_triton.http_url, tmp_path, "--concurrency", "1,2,4")
    assert data["settings"]["measure"] == "ttft"
    _assert_levels(data, [1, 2, 4])
    rows = list(csv.reader(io.StringIO((tmp_path / "sweep.csv").read_text())))
    assert rows[0][:3] == ["Concurrency", "Output Tokens/Second", "Requests/Second"]
    assert [row[0] for row in rows[1:]] == ["1", "2", "4"]
    svg = (tmp_path / "sweep.svg").read_text()
    assert 'class="latency ttft"' in svg and 'class="latency itl"' in svg


def test_cli_sweeps_llm_stream_over_grpc_on_itl(real_triton: RealTriton, tmp_path: Path) -> None:
    """Breaks if the gRPC streaming sweep fails concurrent streams on its one
    ModelStreamInfer call, or --measure itl and its budget do not reach the verdict."""
    data = _sweep(real_triton.grpc_url, tmp_path, "--concurrency", "1,2", "--measure", "itl",
                  "--budget-p95", "1s")  # fmt: skip
    assert data["settings"]["measure"] == "itl"
    assert data["judged_on"] == "judged on output tokens/s and ITL p95"
    _assert_levels(data, [1, 2])
    assert data["operating_point"] in {1, 2}
