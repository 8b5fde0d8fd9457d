"""The canary fills any model from its metadata and config alone, as perf_analyzer does:
batch dim 1, dynamic dims 1, optional inputs left out, shape tensors skipped (and shown)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.export.canary_metrics import CanaryCollector
from tritonwatch.export.status_page import ModelStatus, StatusSnapshot, render_status_page
from tritonwatch.kserve.payload import PayloadError, TensorSpec, build_inputs, input_specs
from tritonwatch.probe.canary.engine import CanaryEngine
from tritonwatch.probe.canary.model_canary import ModelCanary
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.unary import UnarySender
from tritonwatch.state.canary_board import SKIPPED, CanaryBoard
from tritonwatch.wire.datatypes import TRITON_DATATYPES, item_size

pytestmark = pytest.mark.real

SHAPE_TENSOR_CONFIG = {
    "max_batch_size": 0,
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "SHAPE", "data_type": "TYPE_INT32", "dims": [2], "is_shape_tensor": True},
    ],
}
SHAPE_TENSOR_METADATA = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4]},
        {"name": "SHAPE", "datatype": "INT32", "shape": [2]},
    ],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4]}],
}
OPTIONAL_CONFIG = {
    "max_batch_size": 8,
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "MASK", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
    ],
}
OPTIONAL_METADATA = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "MASK", "datatype": "FP32", "shape": [-1, 4]},
    ]
}


def _canary_tensors(
    metadata: dict[str, Any],
    config: dict[str, Any] | None,
    overrides: dict[str, InputOverride] | None = None,
) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of what the canary sends (its dynamic dims are 1)."""
    specs = input_specs("m", metadata, config)
    tensors = build_inputs("m", specs, overrides or {}, dynamic_dim=1)
    return [(t.name, t.shape) for t in tensors]


def test_the_batch_dimension_is_one() -> None:
    """Breaks if a batching model's -1 batch dim is sent as anything but 1 (Triton's
    metadata has it, its config dims do not)."""
    metadata = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}]}
    config = {"max_batch_size": 8, "input": [{"name": "INPUT0", "dims": [16]}]}
    assert _canary_tensors(metadata, config) == [("INPUT0", (1, 16))]


def test_dynamic_dims_are_one_unless_the_shape_is_configured() -> None:
    """Breaks if a dynamic dim is refused, sent as other than 1, or wins over
    ``canary.inputs.NAME.shape``."""
    metadata = {"inputs": [{"name": "SEQUENCE", "datatype": "INT32", "shape": [-1, -1, 3, -1]}]}
    config = {"max_batch_size": 8, "input": [{"name": "SEQUENCE", "dims": [-1, 3, -1]}]}
    assert _canary_tensors(metadata, config) == [("SEQUENCE", (1, 1, 3, 1))]
    override = {"SEQUENCE": InputOverride(shape=(2, 7, 3, 5))}
    assert _canary_tensors(metadata, config, override) == [("SEQUENCE", (2, 7, 3, 5))]


def test_without_a_dynamic_dim_size_a_dynamic_dim_is_still_refused() -> None:
    """Breaks if the sweep (which passes no ``dynamic_dim``, like perf_analyzer without
    ``--shape``) starts guessing dynamic dims."""
    spec = [TensorSpec("x", "FP32", (1, -1))]
    with pytest.raises(PayloadError, match=r"has a dynamic dim; set canary.inputs.x.shape"):
        build_inputs("m", spec, {})


def test_optional_inputs_are_left_out_unless_configured() -> None:
    """Breaks if an input the config marks optional is sent without ``canary.inputs``
    naming it, or left out when it does."""
    assert _canary_tensors(OPTIONAL_METADATA, OPTIONAL_CONFIG) == [("INPUT0", (1, 4))]
    named = {"MASK": InputOverride()}
    assert _canary_tensors(OPTIONAL_METADATA, OPTIONAL_CONFIG, named) == [
        ("INPUT0", (1, 4)),
        ("MASK", (1, 4)),
    ]
    # Without the config nothing says MASK is optional: it is sent.
    assert [name for name, _ in _canary_tensors(OPTIONAL_METADATA, None)] == ["INPUT0", "MASK"]


def test_a_shape_tensor_cannot_be_filled_and_says_which_input_and_why() -> None:
    """Breaks if a shape tensor gets random numbers, or the reason stops naming the input
    and the way out."""
    specs = input_specs("m", SHAPE_TENSOR_METADATA, SHAPE_TENSOR_CONFIG)
    assert specs[1] == TensorSpec("SHAPE", "INT32", (2,), shape_tensor=True)
    with pytest.raises(PayloadError) as caught:
        build_inputs("m", specs, {}, dynamic_dim=1)
    assert caught.value.input_name == "SHAPE"
    assert caught.value.reason == (
        "input 'SHAPE': is a shape tensor (its values are shapes the model uses, not data), "
        "so only a sample can fill it; set canary.inputs.SHAPE.file"
    )
    assert str(caught.value) == f"model 'm', {caught.value.reason}"


def test_a_shape_tensor_with_a_sample_file_is_sent(tmp_path: Path) -> None:
    """Breaks if a shape tensor is refused even when a sample gives its values."""
    sample = tmp_path / "shape.json"
    sample.write_text(json.dumps([3, 5]))
    specs = input_specs("m", SHAPE_TENSOR_METADATA, SHAPE_TENSOR_CONFIG)
    tensors = build_inputs("m", specs, {"SHAPE": InputOverride(file=sample)}, dynamic_dim=1)
    assert [(t.name, t.shape) for t in tensors] == [("INPUT0", (4,)), ("SHAPE", (2,))]
    assert tensors[1].values() == [3, 5]


@pytest.mark.parametrize("datatype", sorted(TRITON_DATATYPES - {"BYTES"}))
def test_every_fixed_size_datatype_gets_a_tensor_of_its_size(datatype: str) -> None:
    """Breaks if a datatype from metadata is refused or packed with the wrong element size."""
    metadata = {"inputs": [{"name": "x", "datatype": datatype.lower(), "shape": [-1, 3, -1]}]}
    config = {"max_batch_size": 4, "input": [{"name": "x", "dims": [3, -1]}]}
    (tensor,) = build_inputs("m", input_specs("m", metadata, config), {}, dynamic_dim=1)
    assert (tensor.datatype, tensor.shape) == (datatype, (1, 3, 1))
    assert len(tensor.raw) == 3 * item_size(datatype)
    assert len(tensor.values()) == 3


def test_bytes_from_metadata_are_random_strings_of_the_configured_length() -> None:
    """Breaks if a BYTES input is not one length-prefixed string of ``string_length``
    characters per element."""
    metadata = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 2]}]}
    config = {"max_batch_size": 8, "input": [{"name": "TEXT", "dims": [2]}]}
    specs = input_specs("m", metadata, config)
    (tensor,) = build_inputs("m", specs, {}, string_length=11, dynamic_dim=1)
    values = tensor.values()
    assert tensor.shape == (1, 2) and [len(v) for v in values] == [11, 11]
    assert values[0] != values[1]
    assert len(tensor.raw) == 2 * (4 + 11)


class _MetadataClient:
    """Answers metadata and config for one model (the canary's prepare needs no more)."""

    protocol = "http"

    def __init__(self, metadata: dict[str, Any], config: dict[str, Any] | None) -> None:
        self._metadata, self._config = metadata, config

    async def extensions(self) -> frozenset[str]:
        return frozenset({"binary_tensor_data"})

    async def metadata(self, model: str, version: str) -> dict[str, Any]:
        return self._metadata

    async def config(self, model: str, version: str) -> dict[str, Any] | None:
        return self._config


PLAN = CanaryPlan(
    "prod",
    "shapes",
    "",
    "http",
    "http://127.0.0.1:1",
    "grpc://127.0.0.1:2",
    1.0,
    False,
    1.0,
    4,
    "random",
)
SHAPE_REASON = (
    "input 'SHAPE': is a shape tensor (its values are shapes the model uses, not data), "
    "so only a sample can fill it; set canary.inputs.SHAPE.file"
)


def _prepare(stats: CanaryBoard, client: _MetadataClient, plan: CanaryPlan = PLAN) -> Any:
    """The canary's sender (None: skipped)."""
    engine = CanaryEngine()  # never served: no thread, no socket
    canary = ModelCanary(plan, client, stats, engine=engine, clock=lambda: 50.0)  # type: ignore[arg-type]
    return asyncio.run(canary.prepare())


def test_a_model_it_cannot_fill_is_skipped_with_one_log_line_a_metric_and_a_status_line() -> None:
    """Breaks if a skipped canary is silent anywhere: the log line, the gauge, the page."""
    stats = CanaryBoard(wall_clock=lambda: 1_700_000_000.0)
    stats.declare([PLAN.key])
    with capture_logs() as logs:
        assert _prepare(stats, _MetadataClient(SHAPE_TENSOR_METADATA, SHAPE_TENSOR_CONFIG)) is None
    assert [log for log in logs if log["log_level"] in ("warning", "error")] == [
        {
            "component": "canary",
            "event": "canary_skipped",
            "log_level": "warning",
            "target": "prod",
            "model": "shapes",
            "input": "SHAPE",
            "reason": SHAPE_REASON,
        }
    ]
    assert stats.skipped() == {PLAN.key: SHAPE_REASON}

    registry = CollectorRegistry()
    registry.register(CanaryCollector(stats, clock=lambda: 60.0))
    exposition = generate_latest(registry).decode()
    assert (
        'tritonwatch_canary_skipped{model="shapes",protocol="http",'
        f'reason="{SHAPE_REASON}",target="prod"}} 1.0'
    ) in exposition

    (series,) = stats.snapshot(60.0)
    assert series.last_error is not None and series.last_error.outcome == SKIPPED
    page = render_status_page(
        StatusSnapshot(
            [
                ModelStatus(
                    "prod",
                    "shapes",
                    "http",
                    True,
                    0.05,
                    {},
                    series.outcomes,
                    last_error=series.last_error,
                )
            ]
        )
    )
    assert (
        '<p class="last-error skipped">canary skipped: <code class="error">'
        "input &#x27;SHAPE&#x27;: is a shape tensor"
    ) in page
    assert "last canary error" not in page


def test_a_reload_that_makes_the_model_fillable_clears_the_skip(tmp_path: Path) -> None:
    """Breaks if a model once skipped stays shown as skipped after a sample file fixed it."""
    stats = CanaryBoard()
    stats.declare([PLAN.key])
    client = _MetadataClient(SHAPE_TENSOR_METADATA, SHAPE_TENSOR_CONFIG)
    assert _prepare(stats, client) is None
    sample = tmp_path / "shape.json"
    sample.write_text("[2, 2]")
    fixed = CanaryPlan(**{**_fields(PLAN), "inputs": {"SHAPE": InputOverride(file=sample)}})
    assert isinstance(_prepare(stats, client, fixed), UnarySender)
    assert stats.skipped() == {}
    (series,) = stats.snapshot(60.0)
    assert series.last_error is None


def _fields(plan: CanaryPlan) -> dict[str, Any]:
    return {name: getattr(plan, name) for name in CanaryPlan.__dataclass_fields__}


def test_a_model_with_dynamic_dims_and_optional_inputs_is_prepared_without_config() -> None:
    """Breaks if the canary needs ``canary.inputs`` for a model any perf_analyzer user
    would run with no flags (batch 1, dynamic dims 1, optional inputs left out)."""
    stats = CanaryBoard()
    stats.declare([PLAN.key])
    metadata = {
        "inputs": [
            *OPTIONAL_METADATA["inputs"],
            {"name": "IDS", "datatype": "INT64", "shape": [-1, -1]},
        ],
        "outputs": [],
    }
    config = {
        "max_batch_size": 8,
        "input": [*OPTIONAL_CONFIG["input"], {"name": "IDS", "dims": [-1]}],
    }
    sender = _prepare(stats, _MetadataClient(metadata, config))
    assert isinstance(sender, UnarySender)
    assert [(t.name, t.shape) for t in sender._tensors] == [("INPUT0", (1, 4)), ("IDS", (1, 1))]
    assert stats.skipped() == {}
