"""The Triton model families on a real registry: promtool-clean, right values, pruned."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from types import MappingProxyType

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from sim_traffic import infer, sim_target

from support import assert_promtool_clean, exposition, sample_value
from tritonwatch.analysis.breakdown import find_bottleneck, latency_breakdown
from tritonwatch.config.schema import Config
from tritonwatch.export.canary_metrics import QUANTILE_FAMILY
from tritonwatch.export.gpu_metrics import GpuMetricsCollector
from tritonwatch.export.triton_metrics import TritonModelCollector, server_quantile_samples
from tritonwatch.records.observations import (
    BatchStatisticsRates,
    DynamicBatching,
    InstanceGroup,
    ModelConfigSnapshot,
    ModelRates,
    TritonSummary,
)
from tritonwatch.records.target_state import (
    FetchStatus,
    ModelState,
    ScrapeSource,
    SourceOutcome,
    TargetState,
)
from tritonwatch.runtime.bottleneck_board import BottleneckBoard
from tritonwatch.scrape.triton_scrapers import TritonScrapers
from tritonwatch.sim.server import Simulator

pytestmark = pytest.mark.real

RATES = ModelRates(
    model="resnet50",
    version="",
    interval_seconds=15.0,
    counters_reset=False,
    requests_per_second=20.0,
    inferences_per_second=80.0,
    executions_per_second=10.0,
    failures_per_second=0.5,
    failures_per_second_by_reason=MappingProxyType({"REJECTED": 0.5, "BACKEND": 0.0}),
    batch_size_average=8.0,
    request_seconds_average=0.050,
    queue_seconds_average=0.040,
    compute_input_seconds_average=0.001,
    compute_infer_seconds_average=0.008,
    compute_output_seconds_average=0.0005,
    pending_requests=3.0,
)
BREAKDOWN = latency_breakdown(RATES, 0.060)
assert BREAKDOWN is not None
MODEL = ModelState(
    model="resnet50",
    rates=RATES,
    server_summary=TritonSummary(
        MappingProxyType({0.5: 48000.0, 0.99: 90000.0}), sum=3_000_000.0, count=60.0
    ),
    batches=BatchStatisticsRates(
        "resnet50", "", 15.0, False, MappingProxyType({4: 2.0, 8: 8.0}), 7.2
    ),
    breakdown=BREAKDOWN,
    bottleneck=find_bottleneck(BREAKDOWN),
    config=ModelConfigSnapshot(
        model="resnet50",
        at=0.0,
        max_batch_size=32,
        dynamic_batching=DynamicBatching((8, 16), 2000),
        instance_groups=(
            InstanceGroup("g", "KIND_GPU", 2, (0, 1)),
            InstanceGroup("c", "KIND_CPU", 1, ()),
        ),
        raw=MappingProxyType({}),
    ),
)
STATE = TargetState(
    target="prod-a",
    sources={
        ScrapeSource.METRICS: SourceOutcome(ScrapeSource.METRICS, FetchStatus.SUCCESS, 0.012),
        ScrapeSource.STATS: SourceOutcome(
            ScrapeSource.STATS, FetchStatus.TIMEOUT, 0.2, "resnet50: x"
        ),
    },
    bad_lines_total=7,
    models={"resnet50": MODEL, "idle": ModelState("idle")},
    gpus={},
    server={"nv_cpu_utilization": 0.25, "nv_cpu_memory_total_bytes": 1e9},
)


class ServerQuantiles(Collector):
    """The summary family as the canary collector renders it, fed the server samples."""

    def __init__(self, states: Iterable[TargetState]) -> None:
        self._states = list(states)

    def collect(self) -> Iterator[Metric]:
        family = Metric(QUANTILE_FAMILY, "Latency quantiles over a sliding window.", "summary")
        for name, labels, value in server_quantile_samples(self._states):
            family.add_sample(name, labels, value)
        yield family


def value(text: str, name: str, **labels: str) -> float | None:
    found: float | None = sample_value(text, name, list(labels.items()))
    return found


def test_exposition_passes_promtool_with_the_right_values() -> None:
    """Every Triton model family passes promtool with the state's values, stats API winning."""
    text = exposition(TritonModelCollector(lambda: [STATE]), ServerQuantiles([STATE]))
    assert_promtool_clean(text)
    model = {"target": "prod-a", "model": "resnet50"}
    assert value(text, "tritonwatch_model_requests_per_second", **model) == 20.0
    assert value(text, "tritonwatch_model_throughput_inferences_per_second", **model) == 80.0
    # the statistics API's average wins over /metrics' where both exist
    assert value(text, "tritonwatch_model_batch_size_average", **model) == 7.2
    assert value(text, "tritonwatch_model_pending_requests", **model) == 3.0
    assert value(text, "tritonwatch_model_server_latency_seconds", **model) == 0.050
    assert value(text, "tritonwatch_model_failures_per_second", reason="REJECTED", **model) == 0.5
    assert (
        value(text, "tritonwatch_model_batch_executions_per_second", batch_size="8", **model) == 8.0
    )
    stage = "tritonwatch_model_latency_breakdown_seconds"
    assert value(text, stage, stage="queue", **model) == pytest.approx(0.040)
    assert value(text, stage, stage="server_other", **model) == pytest.approx(0.0005)
    assert value(text, stage, stage="network_client", **model) == pytest.approx(0.010)
    share = value(text, "tritonwatch_model_latency_breakdown_ratio", stage="queue", **model)
    assert share == pytest.approx(0.040 / 0.060)
    assert value(text, "tritonwatch_model_bottleneck", kind="queue-bound", **model) == 1.0
    assert value(text, "tritonwatch_model_bottleneck", kind="balanced", **model) is None
    assert value(text, "tritonwatch_model_config_max_batch_size", **model) == 32
    assert value(text, "tritonwatch_model_config_max_queue_delay_seconds", **model) == 0.002
    assert value(text, "tritonwatch_model_config_dynamic_batching_enabled", **model) == 1.0
    assert value(text, "tritonwatch_model_config_instances", kind="KIND_GPU", **model) == 4
    assert value(text, "tritonwatch_model_config_instances", kind="KIND_CPU", **model) == 1
    assert value(text, "tritonwatch_server_cpu_utilization_ratio", target="prod-a") == 0.25
    assert value(text, "tritonwatch_scrape_success", target="prod-a", source="metrics") == 1.0
    assert value(text, "tritonwatch_scrape_success", target="prod-a", source="stats") == 0.0
    assert value(text, "tritonwatch_scrape_success", target="prod-a", source="config") is None
    assert (
        value(text, "tritonwatch_scrape_duration_seconds", target="prod-a", source="stats") == 0.2
    )
    assert value(text, "tritonwatch_scrape_bad_lines_total", target="prod-a") == 7
    server = {"window": "1m", "source": "server", **model}
    assert value(text, QUANTILE_FAMILY, quantile="0.99", **server) == 0.090
    assert value(text, f"{QUANTILE_FAMILY}_count", **server) == 60
    assert value(text, f"{QUANTILE_FAMILY}_sum", **server) == 3.0


def test_a_model_without_data_has_no_series() -> None:
    """An idle model (no window yet) is absent, not zero: no traffic is not zero latency."""
    text = exposition(TritonModelCollector(lambda: [STATE]))
    assert 'model="idle"' not in text


def test_series_of_targets_and_models_that_went_away_are_pruned() -> None:
    """Series of a target that is no longer watched leave the exposition."""
    states = [STATE]
    collector = TritonModelCollector(lambda: states)
    registry = CollectorRegistry()
    registry.register(collector)
    assert 'target="prod-a"' in generate_latest(registry).decode()
    states = []
    assert "prod-a" not in generate_latest(registry).decode()


def test_an_idle_summary_stays_nan_and_passes_promtool() -> None:
    """Triton prints NaN quantiles for an idle model: no data, exported as such."""
    idle = ModelState(
        "idle", server_summary=TritonSummary(MappingProxyType({0.5: math.nan}), 0.0, 0.0)
    )
    state = TargetState("t", {}, 0, {"idle": idle}, {}, {})
    text = exposition(ServerQuantiles([state]))
    assert_promtool_clean(text)
    labels = {"target": "t", "model": "idle", "window": "1m", "source": "server"}
    nan = value(text, QUANTILE_FAMILY, quantile="0.5", **labels)
    assert nan is not None and math.isnan(nan)


def test_a_real_scrape_of_the_simulator_passes_promtool() -> None:
    """Everything the scrape feeds — model families, server quantiles from Triton's
    summaries, Triton's GPUs through the GPU collector — on one registry."""
    with Simulator(seed=0, summary_latencies=True) as sim:
        config = Config.model_validate({"targets": [sim_target(sim, "simple").model_dump()]})
        scrapers = TritonScrapers()
        scrapers.apply(config)
        judged = BottleneckBoard(scrapers.states)
        judged.apply(config)
        try:
            scrapers.scrape("sim")
            infer(sim, "simple", 3)
            sim.poll_metrics()
            scrapers.scrape("sim")
            judged.publish("sim")  # the daemon's scrape job judges after each cycle
            text = exposition(
                TritonModelCollector(judged.states),
                ServerQuantiles(scrapers.states()),
                GpuMetricsCollector(triton=scrapers.triton_gpus),
            )
        finally:
            scrapers.close()
    assert_promtool_clean(text)
    model = {"target": "sim", "model": "simple"}
    assert (value(text, "tritonwatch_model_requests_per_second", **model) or 0) > 0
    assert value(text, "tritonwatch_model_bottleneck", kind="balanced", **model) == 1.0
    assert value(text, "tritonwatch_model_config_max_batch_size", **model) == 8
    assert value(text, f"{QUANTILE_FAMILY}_count", window="1m", source="server", **model) == 3
    assert value(text, "tritonwatch_gpu_utilization_ratio", source="triton") is not None
    assert value(text, "tritonwatch_gpu_memory_total_bytes") == 150_754_820_096
