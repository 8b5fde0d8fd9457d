"""The scraper reads the models the watched ones compose — ensemble steps from their
configs, recursively, and BLS ``composing_models`` — without watching them: against a
scripted loopback server with Triton's pages and configs."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sim_traffic import FakeClock

from pipeline_support import ensemble_config, python_config
from stub_server import Route, StubServer
from tritonwatch.analysis.breakdown import judge_target
from tritonwatch.config.schema import TargetConfig
from tritonwatch.export.triton_metrics import TritonModelCollector
from tritonwatch.records.observations import ModelKey
from tritonwatch.scrape.composing_models import MAX_COMPOSING_MODELS, composing_names
from tritonwatch.scrape.target_scraper import TargetScraper
from tritonwatch.scrape.triton_config import parse_model_config

CONFIGS = {
    "pipeline": ensemble_config("pipeline", ["prep", "inner"]),
    "inner": ensemble_config("inner", ["core"]),
    "prep": python_config("prep"),
    "core": python_config("core", delay_us=20_000),
    "bls": python_config("bls"),
}


def _page(totals: Mapping[str, tuple[float, float, float]]) -> bytes:
    """model → (successes, request µs, queue µs), every other stage 0, one execution each."""
    lines = []
    for model, (ok, request_us, queue_us) in totals.items():
        labels = f'{{model="{model}",version="1"}}'
        lines += [
            f"nv_inference_request_success{labels} {ok}",
            f"nv_inference_count{labels} {ok}",
            f"nv_inference_exec_count{labels} {ok}",
            f"nv_inference_request_duration_us{labels} {request_us}",
            f"nv_inference_queue_duration_us{labels} {queue_us}",
            f"nv_inference_compute_infer_duration_us{labels} {request_us - queue_us}",
        ]
    return ("\n".join(lines) + "\n").encode()


def _scraper(stub: StubServer, clock: FakeClock) -> TargetScraper:
    for name, config in CONFIGS.items():
        stub.routes[f"/v2/models/{name}/config"] = Route(body=json.dumps(config).encode())
    target = TargetConfig.model_validate(
        {
            "name": "t",
            "url": stub.url,
            "metrics_url": f"{stub.url}/metrics",
            "models": [{"name": "pipeline"}, {"name": "bls", "composing_models": ["core"]}],
        }
    )
    return TargetScraper(target, 2.0, clock)


def test_steps_and_children_are_read_but_not_watched(stub: StubServer) -> None:
    """Breaks if a nested ensemble's step or a BLS child goes unread, or if a composing
    model is published (or exported) as a watched one."""
    clock = FakeClock()
    scraper = _scraper(stub, clock)
    # 10 s windows: pipeline 20/s at 30 ms; prep 20/s at 4 ms; core 20 (pipeline) + 2×10
    # (bls) = 40/s at 25 ms, 20 of it queue; bls 10/s at 52 ms.
    per_window = {
        "pipeline": (200, 6e6, 0),
        "inner": (200, 5.2e6, 0),
        "prep": (200, 0.8e6, 0),
        "core": (400, 10e6, 8e6),
        "bls": (100, 5.2e6, 0),
    }
    for cycle in range(3):
        totals = {m: (ok * cycle, us * cycle, q * cycle) for m, (ok, us, q) in per_window.items()}
        stub.routes["/metrics"] = Route(body=_page(totals))
        outcome = scraper.scrape_once()
        clock.advance(10.0)
    state = scraper.state()
    assert set(state.models) == {"pipeline", "bls"}
    assert set(state.composing) == {"prep", "inner", "core"}
    assert outcome.rates is not None and ModelKey("core", "") in outcome.rates.models
    core = state.composing["core"]
    assert core.rates is not None and core.rates.requests_per_second == pytest.approx(40.0)
    assert core.config is not None and core.config.dynamic_batching is not None
    assert state.models["bls"].composing_models == ("core",)
    assert state.composing["inner"].config is not None
    assert state.composing["inner"].config.traits.ensemble_steps == ("core",)

    judged = judge_target(state)
    pipeline = judged.models["pipeline"].steps
    assert pipeline is not None and [s.step for s in pipeline.steps] == ["prep", "core"]
    bls = judged.models["bls"].steps
    assert bls is not None
    (child,) = bls.steps
    assert child.calls == pytest.approx(2.0)  # (40/s − 20/s of pipeline's) / bls's 10/s
    assert child.calls_estimated  # pipeline shares core

    registry = CollectorRegistry()
    registry.register(TritonModelCollector(lambda: [judged]))
    text = generate_latest(registry).decode()
    requests = {
        s.labels["model"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "tritonwatch_model_requests_per_second"
    }
    assert requests == {"pipeline", "bls"}  # composing models are not exported as watched
    steps = {
        (s.labels["model"], s.labels["step"], s.labels["stage"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "tritonwatch_model_step_latency_seconds"
    }
    assert steps[("pipeline", "core", "queue")] == pytest.approx(0.020)
    assert steps[("pipeline", "pipeline", "own")] == pytest.approx(0.030 - 0.004 - 0.025)


def test_composing_names_walk_nested_ensembles_and_stop_at_the_bound() -> None:
    configs = {name: parse_model_config(config, name, 0.0) for name, config in CONFIGS.items()}
    names = composing_names({"pipeline": (), "bls": ("core",)}, configs)
    assert names == ("prep", "inner", "core")
    assert composing_names({"core": (), "bls": ("core",)}, configs) == ()  # watched: not composing
    many = {"wide": tuple(f"m{i}" for i in range(MAX_COMPOSING_MODELS + 10))}
    assert len(composing_names(many, {})) == MAX_COMPOSING_MODELS
