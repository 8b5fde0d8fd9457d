"""Model-set YAML: units, the built-in set, and one bad file per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonwatch.sim.builtin import builtin_model_set
from tritonwatch.sim.models import ModelSetError, load_model_set

pytestmark = pytest.mark.sim

EXAMPLE = """\
gpus:
  - uuid: GPU-00000000-0000-4000-8000-0000000000aa
    memory_total: 16GiB
    power_idle_watts: 25
    power_limit_watts: 70
models:
  - name: classifier
    max_batch_size: 16
    dynamic_batching:
      preferred_batch_size: [4, 8]
      max_queue_delay_microseconds: 2000
    instance_group: {count: 2, kind: KIND_GPU, gpus: [0]}
    input:
      - {name: pixels, data_type: TYPE_FP32, dims: [3, 8, 8]}
    output:
      - {name: scores, data_type: TYPE_FP32, dims: [5]}
    timing:
      compute_infer: 2.5ms
      compute_infer_per_item: 150us
      network_delay: 0.01s
    gpu_occupancy: {base: 0.25, per_item: 0.01}
    memory_per_instance: 300MiB
"""

GOOD_MODEL = """\
  - name: m
    input: [{name: x, data_type: TYPE_FP32, dims: [1]}]
    output: [{name: y, data_type: TYPE_FP32, dims: [1]}]
"""
GPUS = "gpus: [{uuid: GPU-00000000-0000-4000-8000-000000000001}]\nmodels:\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_example_file_reads_units_into_microseconds_and_bytes(tmp_path: Path) -> None:
    """Durations and sizes with units land as µs and bytes; Triton-named fields as given."""
    model_set = load_model_set(write(tmp_path, EXAMPLE))
    (gpu,) = model_set.gpus
    (model,) = model_set.models
    assert gpu.memory_total == 16 * 2**30
    assert model.timing.compute_infer == 2500.0
    assert model.timing.compute_infer_per_item == 150.0
    assert model.timing.network_delay == 10_000.0
    assert model.memory_per_instance == 300 * 2**20
    assert model.dynamic_batching is not None
    assert model.dynamic_batching.preferred_batch_size == (4, 8)
    assert model.instance_group.count == 2
    assert model.input[0].dims == (3, 8, 8)


def test_builtin_set_has_three_models_on_three_gpus() -> None:
    """The built-in set validates and places each model on its own GPU."""
    model_set = builtin_model_set()
    assert [m.name for m in model_set.models] == ["simple", "resnet50", "text_identity"]
    assert [m.instance_group.gpus for m in model_set.models] == [(0,), (1,), (2,)]
    assert len({gpu.uuid for gpu in model_set.gpus}) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            GPUS + GOOD_MODEL + "    max_batchsize: 8\n",
            "models.0.max_batchsize: Extra inputs are not permitted (got: 8)",
            id="unknown-key",
        ),
        pytest.param(
            GPUS + GOOD_MODEL + "    max_batch_size: 0\n"
            "    dynamic_batching: {preferred_batch_size: [2]}\n",
            "models.0: preferred_batch_size must not exceed max_batch_size 0, got: [2]",
            id="preferred-without-batch-dim",
        ),
        pytest.param(
            GPUS + GOOD_MODEL + "    max_batch_size: 4\n"
            "    dynamic_batching: {preferred_batch_size: [2, 8]}\n",
            "models.0: preferred_batch_size must not exceed max_batch_size 4, got: [8]",
            id="preferred-over-max",
        ),
        pytest.param(
            GPUS + GOOD_MODEL + "    instance_group: {gpus: [3]}\n",
            "(top level): model 'm': instance_group.gpus must index the 1 gpus, got: [3]",
            id="gpu-index-out-of-range",
        ),
        pytest.param(
            GPUS + GOOD_MODEL + GOOD_MODEL,
            "(top level): model names must be unique, got duplicates: ['m']",
            id="duplicate-model",
        ),
        pytest.param(
            GPUS + GOOD_MODEL + "    timing: {compute_infer: 3 minutes}\n",
            "models.0.timing.compute_infer: must be a duration like 250us, 2ms or 0.5s, "
            "got: '3 minutes'",
            id="bad-duration",
        ),
        pytest.param(
            GPUS + GOOD_MODEL + "    input: [{name: x, data_type: TYPE_FLOAT, dims: [1]}]\n",
            "models.0.input.0.data_type: Input should be 'TYPE_BOOL',",
            id="bad-data-type",
        ),
    ],
)
def test_bad_model_set_names_field_and_value(tmp_path: Path, text: str, message: str) -> None:
    """Each mistake fails at load with the file, the field path and the offending value."""
    path = write(tmp_path, text)
    with pytest.raises(ModelSetError) as caught:
        load_model_set(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_missing_file_and_bad_yaml_are_reported(tmp_path: Path) -> None:
    """An unreadable or non-YAML file fails with the path in the message."""
    with pytest.raises(ModelSetError, match="cannot read model set: No such file"):
        load_model_set(tmp_path / "absent.yaml")
    with pytest.raises(ModelSetError, match="not valid YAML"):
        load_model_set(write(tmp_path, "models: [unclosed\n"))
