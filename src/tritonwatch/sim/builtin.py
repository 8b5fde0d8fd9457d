"""The model set served when ``--models`` is not given.

Three models, each on its own simulated GPU so that a per-model scenario (the demo runs
three models in three scenarios) never leaks into another model's GPU readings:

* ``simple`` — Triton's example model: INPUT0 and INPUT1 INT32 [16], OUTPUT0 = sum,
  OUTPUT1 = difference; about 1 ms per execution.
* ``resnet50`` — an image classifier with a small FP32 [3, 32, 32] input (so tests stay
  light) and FP32 [10] logits; 4 ms + 0.4 ms per image, two instances, preferred batches.
* ``text_identity`` — a BYTES (``TYPE_STRING``) model that echoes its input.

It is written as the same data a YAML file holds, so it doubles as the reference example.
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


def builtin_model_set() -> ModelSet:
    """Returns the built-in model set (validated like any user file)."""
    return parse_model_set(BUILTIN_MODEL_SET, source="<built-in model set>")
