"""The canary histograms' bounds for a config: every SLO threshold is a bound, so each
SLI's good events are one bucket, with no interpolation (docs/design.md §6)."""

from __future__ import annotations

from tritonwatch.config.schema import Config
from tritonwatch.state.canary_board import latency_buckets
from tritonwatch.state.stream_board import ITL_DEFAULT_BUCKETS, TTFT_DEFAULT_BUCKETS


def slo_buckets(config: Config) -> tuple[float, ...]:
    """Histogram buckets with every configured latency threshold among them."""
    return latency_buckets(
        config.slo_for(model).latency.threshold
        for target in config.targets
        for model in target.models
    )


def stream_buckets(config: Config) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """TTFT and ITL histogram buckets with every TTFT / ITL threshold among them — those
    written and those a model gets once it streams (their defaults) — so each streaming
    SLI is a bucket ratio with no interpolation."""
    slos = [
        config.slo_for(model).judged(streams=True)
        for target in config.targets
        for model in target.models
    ]
    ttft = latency_buckets((s.ttft.threshold for s in slos if s.ttft), TTFT_DEFAULT_BUCKETS)
    itl = latency_buckets((s.itl.threshold for s in slos if s.itl), ITL_DEFAULT_BUCKETS)
    return ttft, itl
