"""The model set served when ``--models`` is not given.

Three models, each on its own simulated GPU so that a per-model scenario (the demo runs
three models in three scenarios) never leaks into another model's GPU readings:

* ``simple`` — Triton's example model: INPUT0 and INPUT1 INT32 [16], OUTPUT0 = sum,
  OUTPUT1 = difference; about 1 ms per execution.
* ``resnet50`` — an image classifier with a small FP32 [3, 32, 32] input (so tests stay
  light) and FP32 [10] logits; 4 ms + 0.4 ms per image, two instances, preferred batches.
* ``text_identity`` — a BYTES (``TYPE_STRING``) model that echoes its input.

It is written as the same data a YAML file holds, so it doubles as the reference example.

``KIND_MODELS`` adds the three special kinds, on a GPU of their own (``KIND_GPUS``), for
the demo (``tritonwatch demo``) and for tests that need them; they stay out of the
default set so that ``tritonwatch simulate`` keeps its three plain models:

* ``pipeline`` — an ensemble ``prep`` (1 ms, CPU) → ``core`` (4 ms on the GPU, behind a
  batcher that waits up to 20 ms for a batch of 8: light traffic queues there) →
  ``post`` (0.5 ms, CPU), the shape of tests/triton_models/pipeline;
* ``seq`` — a stateful model (direct sequence batching, START/END/CORRID controls),
  2 ms per execution;
* ``cached`` — a 15 ms model with its response cache on: with the server's cache
  (``response_cache_bytes`` / ``--cache-config local,size=N``) a repeated request is
  answered in microseconds.
"""

from __future__ import annotations

from typing import Any

from tritonwatch.sim.models import ModelSet, parse_model_set

BUILTIN_MODEL_SET: dict[str, Any] = {
    "gpus": [
        {"uuid": "GPU-51a7c0de-0000-4000-8000-000000000000"},
        {"uuid": "GPU-51a7c0de-0000-4000-8000-000000000001"},
        {"uuid": "GPU-51a7c0de-0000-4000-8000-000000000002"},
    ],
    "models": [
        {
            "name": "simple",
            # Not the Python default: a GPU model that quantisation or TensorRT can help
            # (the advisor never proposes that for backend "python").
            "backend": "onnxruntime",
            "max_batch_size": 8,
            "dynamic_batching": {"max_queue_delay_microseconds": 100},
            "instance_group": {"count": 1, "kind": "KIND_GPU", "gpus": [0]},
            "input": [
                {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]},
            ],
            "output": [
                {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]},
            ],
            "compute": "add_sub",
            "timing": {"compute_infer": "1ms", "compute_infer_per_item": "50us"},
            "gpu_occupancy": {"base": 0.2, "per_item": 0.02},
            "memory_per_instance": "256MiB",
        },
        {
            "name": "resnet50",
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "max_batch_size": 32,
            "dynamic_batching": {
                "preferred_batch_size": [8, 16, 32],
                "max_queue_delay_microseconds": 2000,
            },
            "instance_group": {"count": 2, "kind": "KIND_GPU", "gpus": [1]},
            "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, 32, 32]}],
            "output": [{"name": "output", "data_type": "TYPE_FP32", "dims": [10]}],
            "compute": "zeros",
            "timing": {
                "compute_input": "60us",
                "compute_input_per_item": "15us",
                "compute_infer": "4ms",
                "compute_infer_per_item": "400us",
                "compute_output": "20us",
                "compute_output_per_item": "2us",
                "noise_sigma": 0.08,
            },
            "gpu_occupancy": {"base": 0.35, "per_item": 0.02},
            "memory_per_instance": "1.5GiB",
        },
        {
            "name": "text_identity",
            "max_batch_size": 16,
            "dynamic_batching": {"max_queue_delay_microseconds": 500},
            "instance_group": {"count": 1, "kind": "KIND_GPU", "gpus": [2]},
            "input": [{"name": "INPUT0", "data_type": "TYPE_STRING", "dims": [1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [1]}],
            "compute": "identity",
            "timing": {"compute_infer": "2ms", "compute_infer_per_item": "100us"},
            "gpu_occupancy": {"base": 0.25, "per_item": 0.02},
            "memory_per_instance": "768MiB",
        },
    ],
}


_CPU_TIMING = {
    "compute_input": 0,
    "compute_input_per_item": 0,
    "compute_output": 0,
    "compute_output_per_item": 0,
    "noise_sigma": 0.05,
}
_FP32 = {
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "compute": "identity",
    "max_batch_size": 8,
}
KIND_GPUS: list[dict[str, Any]] = [{"uuid": "GPU-51a7c0de-0000-4000-8000-000000000005"}]
"""The GPU the kind models' GPU instances share (index 0 of this list)."""
KIND_MODELS: list[dict[str, Any]] = [
    {
        "name": "prep",
        **_FP32,
        "instance_group": {"count": 1, "kind": "KIND_CPU"},
        "timing": {**_CPU_TIMING, "compute_infer": "1ms", "compute_infer_per_item": "20us"},
    },
    {
        "name": "core",
        **_FP32,
        "dynamic_batching": {"preferred_batch_size": [8], "max_queue_delay_microseconds": 20000},
        "instance_group": {"count": 1, "kind": "KIND_GPU", "gpus": [0]},
        "timing": {"compute_infer": "4ms", "compute_infer_per_item": "100us"},
        "memory_per_instance": "1GiB",
    },
    {
        "name": "post",
        **_FP32,
        "instance_group": {"count": 1, "kind": "KIND_CPU"},
        "timing": {**_CPU_TIMING, "compute_infer": "500us", "compute_infer_per_item": "10us"},
    },
    {"name": "pipeline", **_FP32, "ensemble": ["prep", "core", "post"]},
    {
        "name": "seq",
        **_FP32,
        "instance_group": {"count": 1, "kind": "KIND_GPU", "gpus": [0]},
        "sequence_batching": {
            "direct": {},
            "control_input": [
                {"name": "START", "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]},
                {"name": "END", "kind": "CONTROL_SEQUENCE_END", "int32_false_true": [0, 1]},
                {"name": "CORRID", "kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_UINT64"},
            ],
        },
        "timing": {"compute_infer": "2ms", "compute_infer_per_item": "50us"},
        "memory_per_instance": "512MiB",
    },
    {
        "name": "cached",
        **_FP32,
        "instance_group": {"count": 1, "kind": "KIND_GPU", "gpus": [0]},
        "response_cache": True,
        "timing": {"compute_infer": "15ms", "compute_infer_per_item": "200us"},
        "memory_per_instance": "768MiB",
    },
]
"""An ensemble with its three steps, a stateful model and a cache-enabled model (see the
module docstring); their ``gpus`` index ``KIND_GPUS``."""


def with_kind_models(data: dict[str, Any]) -> dict[str, Any]:
    """Model-set data with ``KIND_MODELS`` added on one more GPU (after ``data``'s)."""
    gpu = len(data["gpus"])
    models = []
    for model in KIND_MODELS:
        group = model.get("instance_group", {})
        placed = (
            {"instance_group": {**group, "gpus": [gpu]}} if group.get("kind") == "KIND_GPU" else {}
        )
        models.append({**model, **placed})
    return {"gpus": [*data["gpus"], *KIND_GPUS], "models": [*data["models"], *models]}


def builtin_model_set() -> ModelSet:
    """Returns the built-in model set (validated like any user file)."""
    return parse_model_set(BUILTIN_MODEL_SET, source="<built-in model set>")
