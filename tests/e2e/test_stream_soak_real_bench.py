"""Streaming canaries on real Triton keep the daemon inside its footprint (issue 18).

The daemon runs as ``tritonwatch run`` in a child process, as in production, and streams
from the decoupled ``llm_stream`` over HTTP ``generate_stream`` and gRPC
``ModelStreamInfer`` (both on the engine thread) beside a plain canary, for 40 s at
4 streams/s per protocol of 16 tokens. Its RSS, threads and open files are sampled
from /proc once a second and judged with the soak benchmark's arithmetic: no growth
after the warm-up (a leak per stream or per token would show within thousands of
tokens), and the resident size under the footprint goal of 60 MiB. CPU is a benchmark
(``benchmarks/footprint.py --streams``), never asserted here.

A soak (growth over 40 s of wall time), so ``bench``: ``pytest -m bench`` runs it. What
it also checks about behaviour, every stream's tokens counted, the suite keeps in
tests/e2e/test_real_triton_e2e.py (the streaming canaries' exact token counts).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import soak

from real_triton import RealTriton
from support import http_get, sample_value

pytestmark = pytest.mark.bench

DURATION_S, WARM_UP_S = 40.0, 15.0
TOKENS = 16
"""``canary.stream.max_tokens``, the default; the model sends exactly that many."""
PROTOCOLS = ("http", "grpc")
FD_POOL_SLACK = 12
"""Descriptors the canaries' connection pools may add after the warm-up (see the test)."""
FOOTPRINT_RSS_MB = 60.0
"""Issue 15's goal for the daemon's resident size."""


def _config(triton: RealTriton, path: Path) -> Path:
    """One target per protocol on the same server; each streams and runs a plain canary."""
    targets = "\n".join(
        f"""  - name: {protocol}
    url: {triton.http_url}
    grpc_url: {triton.grpc_url}
    metrics_url: {triton.metrics_url}
    models: [{{name: llm_stream, canary: {{protocol: {protocol}}}}},
             {{name: batching, canary: {{protocol: {protocol}}}}}]"""
        for protocol in PROTOCOLS
    )
    path.write_text(
        f"""targets:
{targets}
canary: {{rate: 4/s, stream: {{max_tokens: {TOKENS}, timeout: 10s}}}}
scrape: {{interval: 2s, timeout: 1s}}
nvml: {{enabled: false}}
alerting: {{evaluation_interval: 2s}}
"""
    )
    return path


def test_streaming_canaries_grow_neither_memory_threads_nor_files(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    """Breaks if streaming canaries leak memory, threads or descriptors per stream or per
    token, lift the daemon over 60 MiB resident, or lose or miscount streamed tokens."""
    config = _config(real_triton, tmp_path / "c.yaml")
    daemon = soak.Daemon.start(config, tmp_path / "daemon.log", nvml=False)
    samples: list[soak.Sample] = []
    started = time.monotonic()
    try:
        while (now := time.monotonic() - started) < DURATION_S:
            samples.append(soak.read_sample(daemon.process.pid, started))
            time.sleep(max(0.0, len(samples) - now))
        status, text = http_get(f"{daemon.url}/metrics")
        assert status == 200
    finally:
        assert daemon.stop() == 0, daemon.tail()
    growth = soak.analyse(samples, warm_up=WARM_UP_S)
    report = soak.report(growth)
    assert growth.rss_growth_mb <= growth.rss_goal_mb, report
    assert growth.thread_growth <= growth.jitter, report
    # The engine opens a connection for a request that overlaps its canary's last one
    # (a loaded host bunches them), and keeps it: the four canaries' pools level off a
    # few sockets above the warm-up's. A leak per stream would add one per stream, and
    # 40 s at 4/s a protocol are 320 streams.
    assert growth.fd_growth <= FD_POOL_SLACK, report
    peak = max(sample.rss_mb for sample in samples)
    assert peak <= FOOTPRINT_RSS_MB, f"RSS peaked at {peak:.1f} MiB\n{report}"
    for protocol in PROTOCOLS:
        labels = [("target", protocol), ("model", "llm_stream"), ("protocol", protocol)]
        ok = sample_value(
            text, "tritonwatch_canary_requests_total", [*labels, ("outcome", "success")]
        )
        tokens = sample_value(text, "tritonwatch_canary_output_tokens_total", labels)
        assert ok is not None and ok > 60, (protocol, ok)  # ~4/s for 40 s
        assert tokens is not None
        # every stream sent 16 tokens; one still streaming at the scrape counts none yet
        assert ok * TOKENS <= tokens <= (ok + 2) * TOKENS, (protocol, ok, tokens)
