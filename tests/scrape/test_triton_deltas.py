"""Rates and averages between two scrapes, checked by hand against the real fixtures."""

from __future__ import annotations

import pytest

from support import fixtures_dir
from tritonwatch.records.counters import counter_increase
from tritonwatch.records.observations import ModelKey, ModelRates, TritonRates, TritonScrape
from tritonwatch.scrape import triton_families as f
from tritonwatch.scrape.triton_deltas import model_rates, triton_rates
from tritonwatch.scrape.triton_text import parse_triton_metrics

T4 = "GPU-8331ed5e-e44e-72c7-fba5-ed5d48487989"
# The fixtures do not say how far apart they were taken. 400 s is consistent with them:
# the energy counter grew 10467.79 J, i.e. 26.2 W over 400 s, and the power gauge read
# 27.444 W in both scrapes.
GAP = 400.0


def scrape(name: str, at: float, edit: tuple[str, str] | None = None) -> TritonScrape:
    text = (fixtures_dir() / "triton_metrics" / f"{name}.txt").read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    return parse_triton_metrics(text, at)


@pytest.fixture(scope="module")
def rates_05_to_06() -> TritonRates:
    rates = triton_rates(scrape("sample_05", 100.0), scrape("sample_06", 100.0 + GAP))
    assert rates.interval_seconds == GAP
    assert len(rates.models) == 7
    return rates


def of(rates: TritonRates, model: str) -> ModelRates:
    return rates.models[ModelKey(model, "1")]


def test_requests_inferences_and_executions_per_second(rates_05_to_06: TritonRates) -> None:
    """Request, inference and execution rates and batch size from two real scrapes."""
    gnn = of(rates_05_to_06, "gnn")
    # success, count and exec_count each went 1 → 101: 100 in 400 s.
    assert gnn.requests_per_second == pytest.approx(100 / 400)
    assert gnn.inferences_per_second == pytest.approx(0.25)
    assert gnn.executions_per_second == pytest.approx(0.25)
    assert gnn.batch_size_average == pytest.approx(100 / 100)
    assert gnn.failures_per_second == 0
    assert dict(gnn.failures_per_second_by_reason) == {f.UNKNOWN_FAILURE_REASON: 0}
    assert gnn.counters_reset is False and gnn.pending_requests is None  # no gauge in 22.x


@pytest.mark.parametrize(
    ("model", "expected_seconds"),
    [
        # Δduration_us / Δsuccess (100) / 1e6, from the two files:
        (
            "gnn",
            {
                "request": (12857993 - 47836) / 100 / 1e6,  # 0.12810157 s
                "queue": (9098 - 216) / 100 / 1e6,  # 88.82 µs
                "compute_input": (17401 - 225) / 100 / 1e6,  # 171.76 µs
                "compute_infer": (12047511 - 47253) / 100 / 1e6,  # 0.12000258 s
                "compute_output": (766179 - 11) / 100 / 1e6,  # 7.66168 ms
            },
        ),
        (
            "embed",
            {
                "request": (1196137 - 986855) / 100 / 1e6,  # 2.09282 ms
                "queue": (9962 - 239) / 100 / 1e6,  # 97.23 µs
                "compute_input": (12001 - 598) / 100 / 1e6,  # 114.03 µs
                "compute_infer": (1098216 - 985752) / 100 / 1e6,  # 1.12464 ms
                "compute_output": (56858 - 24) / 100 / 1e6,  # 568.34 µs
            },
        ),
        (
            "filter",
            {
                "request": (3112679 - 37803) / 100 / 1e6,  # 30.74876 ms
                "queue": (9750 - 197) / 100 / 1e6,  # 95.53 µs
                "compute_input": (42424 - 341) / 100 / 1e6,  # 420.83 µs
                "compute_infer": (197348 - 35282) / 100 / 1e6,  # 1.62066 ms
                "compute_output": (2834213 - 1734) / 100 / 1e6,  # 28.32479 ms
            },
        ),
    ],
)
def test_average_time_per_request_in_each_stage(
    rates_05_to_06: TritonRates, model: str, expected_seconds: dict[str, float]
) -> None:
    """Each stage's average is its duration increase over the success increase, exactly."""
    rates = of(rates_05_to_06, model)
    for stage, seconds in expected_seconds.items():
        assert getattr(rates, f"{stage}_seconds_average") == pytest.approx(seconds, rel=1e-12)


def test_hand_figures_spelled_out(rates_05_to_06: TritonRates) -> None:
    """The same numbers written as decimals, to catch a wrong formula in both places."""
    assert of(rates_05_to_06, "gnn").request_seconds_average == pytest.approx(0.12810157)
    assert of(rates_05_to_06, "embed").compute_infer_seconds_average == pytest.approx(0.00112464)
    assert of(rates_05_to_06, "filter").compute_output_seconds_average == pytest.approx(0.02832479)


@pytest.mark.parametrize("model", ["exatrkx", "applyfilter", "wcc", "frnn"])
def test_zero_traffic_gives_none_averages_and_zero_rates(
    rates_05_to_06: TritonRates, model: str
) -> None:
    """A model without traffic has zero rates and no averages, not zero latency."""
    rates = of(rates_05_to_06, model)
    assert rates.requests_per_second == 0 and rates.inferences_per_second == 0
    assert rates.batch_size_average is None
    for stage in f.STAGE_DURATION_FAMILIES:
        assert getattr(rates, f"{stage}_seconds_average") is None


def test_gpu_gauges_and_power_from_energy(rates_05_to_06: TritonRates) -> None:
    """GPU gauges are passed on and power is worked out from the energy counter."""
    gpu = rates_05_to_06.gpus[T4]
    assert gpu.energy_watts == pytest.approx((21386.444 - 10918.654) / 400)  # 26.169475 W
    assert gpu.energy_joules == 21386.444
    assert (gpu.utilization_ratio, gpu.power_watts, gpu.power_limit_watts) == (0, 27.444, 70)
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (4930404352, 15842934784)


def test_a_restart_counts_from_zero_and_never_goes_negative() -> None:
    """sample_06 then sample_05 reads as a restart: the new value is the increase."""
    rates = triton_rates(scrape("sample_06", 0.0), scrape("sample_05", 10.0))
    gnn = rates.models[ModelKey("gnn", "1")]
    assert gnn.counters_reset is True
    assert gnn.requests_per_second == pytest.approx(1 / 10)
    assert gnn.request_seconds_average == pytest.approx(47836 / 1 / 1e6)
    assert gnn.queue_seconds_average == pytest.approx(216 / 1e6)
    assert rates.gpus[T4].energy_watts == pytest.approx(10918.654 / 10)
    for model in rates.models.values():
        assert model.counters_reset is (model.model in {"gnn", "embed", "filter"})
        for value in (model.requests_per_second, model.inferences_per_second):
            assert value is not None and value >= 0


def test_one_counter_going_down_resets_the_whole_model() -> None:
    """A restart between scrapes where the duration already passed its old value: the
    average must use the new duration whole, not the difference."""
    before = parse_triton_metrics(
        'nv_inference_request_success{model="m",version="1"} 10\n'
        'nv_inference_request_duration_us{model="m",version="1"} 1000\n',
        0.0,
    )
    after = parse_triton_metrics(
        'nv_inference_request_success{model="m",version="1"} 5\n'
        'nv_inference_request_duration_us{model="m",version="1"} 2000\n',
        5.0,
    )
    rates = model_rates(before.models[ModelKey("m", "1")], after.models[ModelKey("m", "1")], 5.0)
    assert rates.counters_reset is True
    assert rates.request_seconds_average == pytest.approx(2000 / 5 / 1e6)  # not 1000 / 5


def test_failures_by_reason() -> None:
    """sample_04 idle, then 30 REJECTED and 6 CANCELED for densenet_onnx 10 s later."""
    before = scrape("sample_04", 0.0)
    after_text = (
        (fixtures_dir() / "triton_metrics" / "sample_04.txt")
        .read_text()
        .replace(
            'densenet_onnx",reason="REJECTED",version="1"} 0',
            'densenet_onnx",reason="REJECTED",version="1"} 30',
        )
        .replace(
            'densenet_onnx",reason="CANCELED",version="1"} 0',
            'densenet_onnx",reason="CANCELED",version="1"} 6',
        )
    )
    rates = triton_rates(before, parse_triton_metrics(after_text, 10.0))
    densenet = rates.models[ModelKey("densenet_onnx", "1")]
    assert dict(densenet.failures_per_second_by_reason) == {
        "OTHER": 0,
        "BACKEND": 0,
        "CANCELED": 0.6,
        "REJECTED": 3.0,
    }
    assert densenet.failures_per_second == pytest.approx(3.6)
    assert densenet.pending_requests == 0
    assert densenet.request_seconds_average is None  # failures only: no successful request
    assert rates.gpus == {}


def test_compute_averages_leave_out_cache_hits() -> None:
    """10 requests, 4 from the cache: request time is per 10, compute time per 6."""
    labels = '{model="m",version="1"}'

    def page(success: int, hits: int, request_us: int, infer_us: int) -> str:
        return (
            f"nv_inference_request_success{labels} {success}\n"
            f"nv_cache_num_hits_per_model{labels} {hits}\n"
            f"nv_inference_request_duration_us{labels} {request_us}\n"
            f"nv_inference_compute_infer_duration_us{labels} {infer_us}\n"
        )

    rates = triton_rates(
        parse_triton_metrics(page(0, 0, 0, 0), 0.0),
        parse_triton_metrics(page(10, 4, 1000, 600), 2.0),
    ).models[ModelKey("m", "1")]
    assert rates.request_seconds_average == pytest.approx(1000 / 10 / 1e6)
    assert rates.compute_infer_seconds_average == pytest.approx(600 / 6 / 1e6)
    assert rates.queue_seconds_average is None  # the family is not on the page


def test_models_and_gpus_need_two_points() -> None:
    """Models and GPUs present in only one of the two scrapes get no rates."""
    rates = triton_rates(scrape("sample_08", 0.0), scrape("sample_04", 1.0))
    assert rates.models == {} and rates.gpus == {}


def test_scrapes_out_of_order_are_refused() -> None:
    """A second scrape not later than the first is refused."""
    with pytest.raises(ValueError, match="must come after"):
        triton_rates(scrape("sample_05", 5.0), scrape("sample_06", 5.0))


@pytest.mark.parametrize(
    ("previous", "current", "reset", "expected"),
    [
        (10.0, 15.0, False, 5.0),
        (10.0, 4.0, False, 4.0),  # went down: restarted, the new value is the increase
        (10.0, 15.0, True, 15.0),  # the model restarted: taken from zero
        (None, 15.0, False, None),
        (10.0, float("nan"), False, None),
    ],
)
def test_counter_increase(
    previous: float | None, current: float | None, reset: bool, expected: float | None
) -> None:
    """A counter's increase: a fall or reset starts from zero, unknown or NaN gives None."""
    assert counter_increase(previous, current, reset) == expected
