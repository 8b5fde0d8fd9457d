"""Runs the real perf_analyzer (``.triton/bin/perf_analyzer``) and reads its ``-f`` CSV.

Two things every run here needs (docs/perf_analyzer.md says why):

* ``--input-data zero``: perf_analyzer's random FP32/INT32 data holds negative values,
  which the test models in tests/triton_models fail on purpose ("negative input").
* No proxy variables: libcurl (HTTP) and gRPC both honour ``http_proxy``; a proxy in
  the way breaks the run or, for HTTP, ends it with "Send failed since rewinding of the
  data stream failed" when it drops a kept-alive connection.

Stability is relaxed (``-s 100``): on a shared two-core machine perf_analyzer's 10 %
default often never settles; the tests check the numbers, not their spread.
"""

from __future__ import annotations

import csv
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from real_triton import perf_analyzer_binary

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")
TIMEOUT_SECONDS = 180.0


def proxy_free_environment() -> dict[str, str]:
    """This process's environment without proxy variables (either case)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARIABLES}
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


def run_perf_analyzer(
    model: str,
    url: str,
    protocol: str,
    csv_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """One perf_analyzer run against ``url`` (``127.0.0.1:PORT``); its output on failure."""
    command = [
        str(perf_analyzer_binary()),
        "-m", model, "-u", url, "-i", protocol,
        "--input-data", "zero",
        "--measurement-interval", "1000", "--max-trials", "10", "-s", "100",
        "-f", str(csv_path),
        *extra,
    ]  # fmt: skip
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        env=env if env is not None else proxy_free_environment(),
    )


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the rows of a perf_analyzer-style CSV."""
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def numbers(row: dict[str, str], columns: Sequence[str]) -> list[float]:
    return [float(row[column]) for column in columns]
