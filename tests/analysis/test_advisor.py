"""The advisor over hand-made windows that mirror the simulator's scenarios.

Each scenario's numbers follow docs/simulator.md's "what you should see" column (budget
50 ms). The matrix proves that each rule fires on its scenario, that the other rules stay
silent there, and that nothing fires on ``healthy``.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from structlog.testing import capture_logs

from tritonwatch.analysis.advisor import advise
from tritonwatch.analysis.advisor_records import (
    Action,
    AdvisorInput,
    with_llm_window,
    with_server_window,
)
from tritonwatch.analysis.slo import Severity
from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import ModelRates
from tritonwatch.runtime.recommendation_board import RecommendationBoard

HEALTHY = AdvisorInput(
    target="t",
    model="m",
    latency_budget_seconds=0.050,
    p95_seconds=0.020,
    client_mean_seconds=0.012,
    request_seconds=0.010,
    queue_seconds=0.0005,
    compute_input_seconds=0.0003,
    compute_infer_seconds=0.008,
    compute_output_seconds=0.0002,
    requests_per_second=20.0,
    batch_size_average=1.2,
    max_batch_size=8,
    dynamic_batching=True,
    max_queue_delay_microseconds=100,
    instance_count=1,
    gpu_utilization=0.3,
    gpu_memory_used_bytes=4e9,
    gpu_memory_total_bytes=16e9,
    pending_requests=0.0,
    protocol="http",
)

SCENARIOS: dict[str, tuple[AdvisorInput, set[Action]]] = {
    "healthy": (HEALTHY, set()),
    "queue-delay-too-high": (
        replace(
            HEALTHY,
            p95_seconds=0.085,
            client_mean_seconds=0.082,
            request_seconds=0.080,
            queue_seconds=0.072,
            compute_infer_seconds=0.006,
            batch_size_average=1.6,
            max_batch_size=64,
            max_queue_delay_microseconds=80_000,
            gpu_utilization=0.1,
            pending_requests=1.5,
        ),
        {Action.LOWER_QUEUE_DELAY},
    ),
    "gpu-underused": (
        replace(
            HEALTHY,
            p95_seconds=0.120,
            client_mean_seconds=0.082,
            request_seconds=0.080,
            queue_seconds=0.038,
            compute_infer_seconds=0.040,
            requests_per_second=24.0,
            batch_size_average=1.0,
            max_batch_size=1,
            max_queue_delay_microseconds=0,
            gpu_utilization=0.3,
            pending_requests=2.0,
        ),
        {Action.ADD_INSTANCE},
    ),
    "compute-bound": (
        replace(
            HEALTHY,
            p95_seconds=0.110,
            client_mean_seconds=0.102,
            request_seconds=0.100,
            queue_seconds=0.002,
            compute_infer_seconds=0.095,
            requests_per_second=15.0,
            batch_size_average=1.5,
            max_queue_delay_microseconds=0,
            instance_count=2,
            gpu_utilization=0.92,
            gpu_memory_used_bytes=8e9,
            pending_requests=0.5,
        ),
        {Action.OPTIMIZE_MODEL},
    ),
    "network-bound": (
        replace(HEALTHY, p95_seconds=0.058, client_mean_seconds=0.052),
        {Action.REDUCE_NETWORK_OVERHEAD},
    ),
    "memory-scarce": (
        replace(HEALTHY, instance_count=2, gpu_memory_used_bytes=0.93 * 16e9),
        {Action.REMOVE_INSTANCE},
    ),
    "low-throughput-small-batches": (
        replace(
            HEALTHY,
            p95_seconds=0.009,
            client_mean_seconds=0.007,
            request_seconds=0.006,
            queue_seconds=0.003,
            compute_infer_seconds=0.0021,
            requests_per_second=400.0,
            batch_size_average=1.0,
            dynamic_batching=False,
            max_queue_delay_microseconds=None,
            instance_count=2,
            gpu_utilization=0.45,
            pending_requests=3.0,
        ),
        {Action.ENABLE_DYNAMIC_BATCHING},
    ),
    "io-bound (no simulator scenario)": (
        replace(
            HEALTHY,
            request_seconds=0.012,
            compute_input_seconds=0.004,
            compute_output_seconds=0.003,
        ),
        {Action.REDUCE_IO},
    ),
    "rejected requests (error burst fault)": (
        replace(HEALTHY, failures_per_second_by_reason=MappingProxyType({"REJECTED": 2.0})),
        {Action.TUNE_QUEUE_POLICY},
    ),
    "heavy load, small batches": (
        replace(
            HEALTHY,
            p95_seconds=0.015,
            batch_size_average=2.0,
            max_batch_size=32,
            gpu_utilization=0.7,
            pending_requests=8.0,
        ),
        {Action.RAISE_QUEUE_DELAY},
    ),
    "an added instance that bought nothing": (
        replace(
            HEALTHY,
            instance_count=3,
            last_change_added_instance=True,
            throughput_before_last_change=19.5,
        ),
        {Action.REMOVE_INSTANCE},
    ),
    "kv-cache-pressure": (
        replace(
            HEALTHY,
            streaming=True,
            llm_backend="vllm",
            kv_cache_usage_ratio=0.98,
            preemptions_per_second=0.4,
            requests_waiting=12.0,
            requests_running=40.0,
            requests_max=128.0,
            gpu_utilization=0.9,
        ),
        {Action.REDUCE_KV_PRESSURE},
    ),
    "ttft-queueing": (
        replace(
            HEALTHY,
            streaming=True,
            llm_backend="vllm",
            kv_cache_usage_ratio=0.3,
            requests_waiting=8.0,
            requests_running=4.0,
            requests_max=4.0,
            ttft_burning=True,
            ttft_p95_seconds=1.5,
            ttft_budget_seconds=0.5,
            gpu_utilization=0.9,
        ),
        {Action.SCALE_OUT_PREFILL},
    ),
    "slow tokens from a full batch (no simulator scenario)": (
        replace(
            HEALTHY,
            streaming=True,
            llm_backend="tensorrt_llm",
            kv_cache_usage_ratio=0.6,
            requests_waiting=0.0,
            requests_running=60.0,
            requests_max=64.0,
            itl_burning=True,
            itl_p95_seconds=0.09,
            itl_budget_seconds=0.05,
            gpu_utilization=0.9,
        ),
        {Action.LOWER_MAX_SEQUENCES},
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_fires_its_rule_and_only_it(scenario: str) -> None:
    """Each simulator scenario fires exactly its own rule: none missing, none extra."""
    window, expected = SCENARIOS[scenario]
    assert {r.action for r in advise(window)} == expected


def test_every_rule_has_a_scenario() -> None:
    """Every advisor action is shown firing by at least one scenario."""
    covered = set().union(*(expected for _, expected in SCENARIOS.values()))
    assert covered == set(Action)


def test_recommendations_carry_values_evidence_and_effect() -> None:
    """Advice carries current and proposed values, severity, evidence, reason and its effect."""
    (lower,) = advise(SCENARIOS["queue-delay-too-high"][0])
    assert (lower.parameter, lower.current, lower.proposed) == (
        "max_queue_delay_microseconds",
        80_000,
        40_000,
    )
    assert lower.proposed_change == "max_queue_delay_microseconds: 80000 → 40000"
    assert lower.config_change
    assert lower.severity == Severity.TICKET
    assert lower.evidence["queue_share"] == pytest.approx(0.9)
    assert lower.evidence["p95_seconds"] == 0.085
    assert "40.0 ms less" in lower.expected_effect
    assert "p95 85.0 ms is over the 50.0 ms budget" in lower.reason


def test_at_most_one_configuration_change_the_highest_priority() -> None:
    """Memory scarce *and* queue delay over budget *and* REJECTED failures: the instance
    goes first; the queue delay waits for the next round; advice is always given."""
    window = replace(
        SCENARIOS["queue-delay-too-high"][0],
        instance_count=2,
        gpu_memory_used_bytes=0.95 * 16e9,
        failures_per_second_by_reason=MappingProxyType({"REJECTED": 0.5}),
    )
    actions = [r.action for r in advise(window)]
    assert actions == [Action.REMOVE_INSTANCE, Action.TUNE_QUEUE_POLICY]
    assert [r.config_change for r in advise(window)] == [True, False]


def test_unknown_numbers_keep_rules_silent() -> None:
    """A window with nothing measured fires no rule: unknown is not zero."""
    bare = AdvisorInput(target="t", model="m", latency_budget_seconds=0.05)
    assert advise(bare) == []


def test_book_logs_once_per_change_and_on_clear() -> None:
    """The book logs advice once per change, not per round, and logs when it clears."""
    book = RecommendationBoard()
    window = SCENARIOS["queue-delay-too-high"][0]
    with capture_logs() as logs:
        book.update("t", "m", advise(window))
        book.update("t", "m", advise(window))
        book.update("t", "m", advise(replace(window, max_queue_delay_microseconds=40_000)))
        book.update("t", "m", [])
    assert [(e["event"], e.get("proposed")) for e in logs] == [
        ("recommendation", 40_000),
        ("recommendation", 20_000),
        ("recommendation_cleared", None),
    ]
    assert logs[0]["current"] == 80_000
    assert logs[0]["evidence"]["queue_share"] == pytest.approx(0.9)
    assert book.active() == []


def test_book_keeps_models_apart_and_forgets_removed_ones() -> None:
    """Advice for one model never overwrites another's and goes when its model leaves."""
    book = RecommendationBoard()
    book.update("t", "a", advise(replace(SCENARIOS["memory-scarce"][0], model="a")))
    book.update("t", "b", advise(replace(SCENARIOS["compute-bound"][0], model="b")))
    assert [(r.model, r.action) for r in book.active()] == [
        ("a", Action.REMOVE_INSTANCE),
        ("b", Action.OPTIMIZE_MODEL),
    ]
    assert set(book.by_model()) == {("t", "a"), ("t", "b")}
    book.retain([("t", "b")])
    assert [r.model for r in book.active()] == ["b"]


def _rates(
    seconds: float, ok: float, queue: float | None, batch: float, pending: float
) -> ModelRates:
    return ModelRates(
        model="m",
        version="1",
        interval_seconds=seconds,
        counters_reset=False,
        requests_per_second=ok,
        inferences_per_second=ok * batch,
        executions_per_second=ok,
        failures_per_second=0.5,
        failures_per_second_by_reason=MappingProxyType({"REJECTED": 0.5} if ok > 10 else {}),
        batch_size_average=batch,
        request_seconds_average=None if queue is None else queue * 2,
        queue_seconds_average=queue,
        compute_input_seconds_average=None,
        compute_infer_seconds_average=None,
        compute_output_seconds_average=None,
        pending_requests=pending,
    )


def test_server_window_weights_by_time_requests_and_executions() -> None:
    """10 s at 30 req/s (queue 10 ms, batch 4, 6 pending) and 30 s at 10 req/s (queue
    2 ms, batch 2, 2 pending): 300 and 300 requests, so the queue average is 6 ms."""
    window = with_server_window(
        HEALTHY, [_rates(10.0, 30.0, 0.010, 4.0, 6.0), _rates(30.0, 10.0, 0.002, 2.0, 2.0)]
    )
    assert window.requests_per_second == pytest.approx(15.0)
    assert window.queue_seconds == pytest.approx(0.006)
    assert window.request_seconds == pytest.approx(0.012)
    assert window.batch_size_average == pytest.approx(3.0)
    assert window.pending_requests == pytest.approx(3.0)
    assert window.compute_infer_seconds is None
    assert dict(window.failures_per_second_by_reason) == {"REJECTED": pytest.approx(0.125)}
    assert with_server_window(HEALTHY, []).requests_per_second is None


def test_llm_window_averages_gauges_and_weights_rates_by_time() -> None:
    """KV 0.9 and 1.0 average to 0.95; 0.2 preemptions/s over 10 s and 1.0 over 30 s
    weigh to 0.8; the latest scrape names the backend and the engine's maximum."""
    older = LlmReadings("vllm", kv_cache_usage_ratio=0.9, requests_waiting=2.0, requests_max=64)
    newer = LlmReadings("vllm", kv_cache_usage_ratio=1.0, requests_waiting=4.0, requests_max=128)
    window = with_llm_window(
        HEALTHY,
        [
            (older, LlmRates(10.0, preemptions_per_second=0.2, ttft_mean_seconds=0.1)),
            (newer, LlmRates(30.0, preemptions_per_second=1.0, ttft_mean_seconds=0.5)),
            (newer, None),
        ],
    )
    assert window.streaming
    assert window.llm_backend == "vllm"
    assert window.kv_cache_usage_ratio == pytest.approx((0.9 + 1.0 + 1.0) / 3)
    assert window.requests_waiting == pytest.approx(10.0 / 3)
    assert window.requests_max == 128
    assert window.preemptions_per_second == pytest.approx(0.8)
    assert window.server_ttft_mean_seconds == pytest.approx(0.4)
    assert window.requests_running is None
    assert with_llm_window(HEALTHY, []) == HEALTHY
