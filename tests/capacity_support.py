"""The daemon config that sweeps real Triton's ``saturating`` model at once: shared by
the capacity e2e test and the capacity benchmark (benchmarks/capacity_accuracy.py)."""

from __future__ import annotations

from collections.abc import Sequence

from real_triton import RealTriton

MODEL = "saturating"
BUDGET_MS = 100
"""The latency SLO's p95 threshold: the sweep's budget."""


def swept_config(
    triton: RealTriton,
    *,
    canary_rate: float,
    window_seconds: float,
    max_windows: int,
    levels: Sequence[int] = (1, 2, 4, 8),
    extra: str = "",
) -> str:
    """A config watching ``saturating`` on ``triton`` with a ``BUDGET_MS`` p95 budget,
    scrapes every second and a scheduled sweep a second after start; ``extra`` is
    appended (more top-level sections)."""
    return f"""
targets:
  - name: cap
    url: {triton.http_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: {MODEL}}}]
canary: {{rate: {canary_rate:g}/s}}
slo: {{latency: {{threshold: {BUDGET_MS}ms}}}}
scrape: {{interval: 1s, timeout: 800ms}}
sweep:
  enabled: true
  interval: 1h
  first_run_after: 1s
  concurrency: [{", ".join(map(str, levels))}]
  measurement_interval: {window_seconds:g}s
  max_windows: {max_windows}
{extra}"""
