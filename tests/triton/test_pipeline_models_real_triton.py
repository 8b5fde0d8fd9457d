"""The pipeline test models on the real server do what their configs say: the ensemble
``pipeline`` runs prep → core → post once each per request, ``bls`` calls core twice,
and the ensemble's own statistics hide core's batching wait (docs/design.md §4b)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from real_triton import RealTriton

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("real_triton")]

MODELS = ("pipeline", "prep", "core", "post", "bls")


def _counts(server: RealTriton) -> dict[str, dict[str, Any]]:
    return {model: server.stats(model)["inference_stats"] for model in MODELS}


def _increase(
    before: dict[str, Any], after: dict[str, Any], model: str, stage: str
) -> tuple[int, int]:
    """(Δcount, Δns) of one stage of one model."""
    old, new = before[model][stage], after[model][stage]
    return new["count"] - old["count"], new["ns"] - old["ns"]


def test_the_ensemble_runs_each_step_once_and_hides_cores_queue(real_triton: RealTriton) -> None:
    """Breaks if the ensemble stops echoing, a step is skipped or run twice, or core's
    20 ms batching wait stops showing in core's queue (and in no field of the ensemble)."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{real_triton.http_port}")
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    before = _counts(real_triton)
    for _ in range(3):
        tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("pipeline", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    after = _counts(real_triton)
    for model in ("pipeline", "prep", "core", "post"):
        assert _increase(before, after, model, "success")[0] == 3, model
    core_queue = _increase(before, after, "core", "queue")[1] / 3
    assert core_queue >= 15e6  # ~20 ms per request: light traffic never fills a batch of 8
    assert _increase(before, after, "pipeline", "queue")[1] / 3 < 1e6  # the ensemble: ~0
    pipeline = _increase(before, after, "pipeline", "success")[1] / 3
    assert pipeline >= core_queue  # the wait is inside the ensemble's request time


def test_bls_calls_core_twice_per_request(real_triton: RealTriton) -> None:
    """Breaks if the BLS model stops echoing or stops making two core requests, or if
    its compute_infer stops including its waits on core."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{real_triton.http_port}")
    data = np.full((1, 16), 7.0, dtype=np.float32)
    before = _counts(real_triton)
    for _ in range(2):
        tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("bls", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    after = _counts(real_triton)
    assert _increase(before, after, "bls", "success")[0] == 2
    assert _increase(before, after, "core", "success")[0] == 4
    infer = _increase(before, after, "bls", "compute_infer")[1] / 2
    core = _increase(before, after, "core", "success")[1] / 4
    assert infer >= 2 * core  # the parent's compute holds both child requests
