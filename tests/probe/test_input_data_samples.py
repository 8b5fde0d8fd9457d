"""``canary.input_data`` samples made into a model's request tensors (kserve/input_data.py)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.kserve.input_data import load_samples
from tritonwatch.kserve.payload import PayloadError, Tensor, TensorSpec, build_inputs
from tritonwatch.wire.datatypes import pack, serialize_bytes

TOKENS = TensorSpec("TOKENS", "INT64", (-1,))
"""tests/triton_models/refuses: INT64 [-1], no batching."""
DENSE = TensorSpec("INPUT0", "FP32", (1, 4))
"""A batching model's FP32 [4] input, the batch dim resolved to 1."""
TEXT = TensorSpec("TEXT", "BYTES", (1, 1))
FLAGS = TensorSpec("FLAGS", "BOOL", (1, 2), optional=True)


def _file(tmp_path: Path, samples: list[dict[str, object]]) -> Path:
    path = tmp_path / "input.json"
    path.write_text(json.dumps({"data": samples}), encoding="utf-8")
    return path


def _load(
    path: Path,
    specs: list[TensorSpec],
    *,
    batching: bool,
    overrides: dict[str, InputOverride] | None = None,
) -> list[tuple[Tensor, ...]]:
    defaults = build_inputs("m", specs, overrides or {}, dynamic_dim=1)
    return load_samples("m", path, specs, defaults, overrides or {}, batching=batching)


def test_the_forms_become_the_same_tensor_and_dynamic_dims_come_from_the_count(
    tmp_path: Path,
) -> None:
    """Breaks if a flat list, content with a shape, or b64 of the same tokens make
    different requests, or a dynamic dim is not read from the element count."""
    tokens = list(range(1000, 1008))
    b64 = base64.b64encode(struct.pack("<8q", *tokens)).decode()
    path = _file(
        tmp_path,
        [
            {"TOKENS": tokens},
            {"TOKENS": {"content": tokens, "shape": [8]}},
            {"TOKENS": {"b64": b64}},
        ],
    )
    expected = Tensor("TOKENS", "INT64", (8,), pack("INT64", tokens))
    assert _load(path, [TOKENS], batching=False) == [(expected,)] * 3


def test_a_batching_models_sample_shape_leaves_the_batch_dim_out(tmp_path: Path) -> None:
    """Breaks if a sample's shape is read with the batch dim (perf_analyzer's is without)
    or the elements of a batching model's input are not packed as its datatype."""
    path = _file(tmp_path, [{"INPUT0": {"content": [0, 0.5, 1, 2], "shape": [4]}}])
    (request,) = _load(path, [DENSE], batching=True)
    assert request == (Tensor("INPUT0", "FP32", (1, 4), pack("FP32", [0, 0.5, 1, 2])),)


def test_inputs_a_sample_leaves_out_are_filled_as_without_the_file(tmp_path: Path) -> None:
    """Breaks if an input a sample omits is not the canary's usual tensor, or an optional
    input a sample gives is not sent."""
    path = _file(tmp_path, [{"TEXT": ["hello"], "FLAGS": [True, 0]}, {"INPUT0": [1, 2, 3, 4]}])
    specs = [DENSE, TEXT, FLAGS]
    defaults = build_inputs("m", specs, {}, dynamic_dim=1)
    first, second = load_samples("m", path, specs, defaults, {}, batching=True)
    assert first == (
        defaults[0],
        Tensor("TEXT", "BYTES", (1, 1), serialize_bytes([b"hello"])),
        Tensor("FLAGS", "BOOL", (1, 2), b"\x01\x00"),
    )
    assert second == (Tensor("INPUT0", "FP32", (1, 4), pack("FP32", [1, 2, 3, 4])), defaults[1])


def test_an_override_shape_shapes_a_flat_sample(tmp_path: Path) -> None:
    """Breaks if ``canary.inputs.NAME.shape`` stops applying to a sample without a shape."""
    spec = TensorSpec("GRID", "INT32", (-1, -1))
    path = _file(tmp_path, [{"GRID": [1, 2, 3, 4, 5, 6]}])
    overrides = {"GRID": InputOverride(shape=(2, 3))}
    (request,) = _load(path, [spec], batching=False, overrides=overrides)
    assert request[0].shape == (2, 3)


@pytest.mark.parametrize(
    ("samples", "spec", "message"),
    [
        (
            [{"NOPE": [1]}],
            TOKENS,
            "input 'NOPE': {path}, sample 0: the model has no such input (it has: TOKENS)",
        ),
        (
            [{"TOKENS": [1000]}, {"TOKENS": [1.5]}],
            TOKENS,
            "input 'TOKENS': {path}, sample 1: 1.5 is no INT64 element",
        ),
        (
            [{"TOKENS": ["1000"]}],
            TOKENS,
            "input 'TOKENS': {path}, sample 0: '1000' is no INT64 element",
        ),
        (
            [{"TOKENS": [True]}],
            TOKENS,
            "input 'TOKENS': {path}, sample 0: true is no INT64 element",
        ),
        ([{"TEXT": [3]}], TEXT, "input 'TEXT': {path}, sample 0: 3 is no BYTES element"),
        (
            [{"INPUT0": [300, 1, 2, 3]}],
            TensorSpec("INPUT0", "INT8", (1, 4)),
            "input 'INPUT0': {path}, sample 0: 300 is out of bounds for INT8",
        ),
        (
            [{"INPUT0": [1, 2, 3]}],
            DENSE,
            "input 'INPUT0': {path}, sample 0: 3 elements do not fill shape [1, 4]",
        ),
        (
            [{"INPUT0": {"content": [1, 2, 3, 4], "shape": [2, 2]}}],
            DENSE,
            "input 'INPUT0': {path}, sample 0: shape [1, 2, 2] does not fit the model's [1, 4]",
        ),
        (
            [{"INPUT0": {"b64": "AAAAAA=="}}],
            DENSE,
            "input 'INPUT0': {path}, sample 0: 1 elements do not fill shape [1, 4]",
        ),
        (
            [{"INPUT0": {"b64": "AAA="}}],
            DENSE,
            "input 'INPUT0': {path}, sample 0: 2 bytes is no whole number of FP32 elements",
        ),
        (
            [{"GRID": [1, 2]}],
            TensorSpec("GRID", "INT32", (-1, -1)),
            "input 'GRID': {path}, sample 0: shape [-1, -1] has several dynamic dims: give the "
            'sample a "shape"',
        ),
    ],
)
def test_a_sample_that_does_not_fit_the_model_names_file_sample_input_and_value(
    tmp_path: Path, samples: list[dict[str, object]], spec: TensorSpec, message: str
) -> None:
    """Breaks if a sample the model cannot take is sent anyway, or the canary's skip
    reason leaves out the file, the sample, the input or the value."""
    path = _file(tmp_path, samples)
    with pytest.raises(PayloadError) as caught:
        _load(path, [spec], batching=spec.shape[:1] == (1,))
    assert caught.value.reason == message.format(path=path)


def test_a_file_that_cannot_be_read_is_a_skip_reason(tmp_path: Path) -> None:
    """Breaks if a file gone since the config check crashes the canary instead of
    skipping it with the reader's message."""
    with pytest.raises(PayloadError, match="cannot read the file"):
        _load(tmp_path / "gone.json", [TOKENS], batching=False)
