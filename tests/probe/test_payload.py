"""Request tensors from metadata and config: batch dims, dtypes, overrides, samples, errors."""

from __future__ import annotations

import json
import string
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from support import fixtures_dir
from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.kserve.payload import (
    STRING_CHARACTERS,
    PayloadError,
    Tensor,
    TensorSpec,
    build_inputs,
    input_specs,
)

pytestmark = pytest.mark.real


def _metadata_from_config(config: dict[str, object]) -> dict[str, object]:
    """The metadata Triton derives from a config: batch dim -1 prepended when batching."""
    batching = int(config.get("max_batch_size", 0)) > 0  # type: ignore[call-overload]
    return {
        "name": config["name"],
        "inputs": [
            {
                "name": i["name"],
                "datatype": i["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES"),
                "shape": ([-1] if batching else []) + list(i["dims"]),
            }
            for i in config["input"]  # type: ignore[attr-defined]
        ],
    }


def test_real_config_batching_model_gets_batch_one() -> None:
    """Breaks if a batching model's inputs do not get batch 1 and their INT64 dtype."""
    config = json.loads(
        (fixtures_dir() / "triton_config" / "config_01_phishing-bert-onnx.json").read_text()
    )
    specs = input_specs("phishing-bert-onnx", _metadata_from_config(config), config)
    assert specs == [
        TensorSpec("input_ids", "INT64", (1, 128)),
        TensorSpec("attention_mask", "INT64", (1, 128)),
    ]
    tensors = build_inputs("phishing-bert-onnx", specs, {})
    assert [(t.name, t.data.shape, t.data.dtype) for t in tensors] == [
        ("input_ids", (1, 128), np.dtype(np.int64)),
        ("attention_mask", (1, 128), np.dtype(np.int64)),
    ]
    assert tensors[0].data.min() >= 0 and tensors[0].data.max() <= 100


def test_without_config_a_leading_dynamic_dim_is_the_batch() -> None:
    """Breaks if, without a config, a leading -1 is not taken for the batch dim (as 1)."""
    metadata = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]}
    assert input_specs("m", metadata, None) == [TensorSpec("x", "FP32", (1, 4))]


def test_non_batching_model_keeps_its_shape() -> None:
    """Breaks if a non-batching model's dynamic dim is guessed instead of asking for a shape."""
    metadata = {"inputs": [{"name": "x", "datatype": "FP16", "shape": [-1, 4]}]}
    specs = input_specs("m", metadata, {"max_batch_size": 0})
    assert specs == [TensorSpec("x", "FP16", (-1, 4))]
    with pytest.raises(PayloadError) as caught:
        build_inputs("m", specs, {})
    assert str(caught.value) == (
        "model 'm', input 'x': shape [-1, 4] has a dynamic dim; set canary.inputs.x.shape"
    )
    tensors = build_inputs("m", specs, {"x": InputOverride(shape=(3, 4))}, mode="zero")
    assert tensors[0].data.shape == (3, 4)
    assert tensors[0].data.dtype == np.float16
    assert not tensors[0].data.any()


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("BOOL", np.dtype(bool)),
        ("UINT8", np.dtype(np.uint8)),
        ("INT8", np.dtype(np.int8)),
        ("UINT64", np.dtype(np.uint64)),
        ("FP64", np.dtype(np.float64)),
        ("BF16", np.dtype(ml_dtypes.bfloat16)),
    ],
)
def test_every_triton_datatype_maps_to_its_numpy_type(datatype: str, dtype: np.dtype) -> None:
    """Breaks if a Triton datatype is sent as another numpy dtype (BF16 as ml_dtypes')."""
    tensors = build_inputs("m", [TensorSpec("x", datatype, (1, 2))], {})
    assert tensors[0].data.dtype == dtype


def test_bytes_input_gets_random_strings_like_perf_analyzer() -> None:
    """Breaks if BYTES inputs stop getting one 128-character perf_analyzer string per element."""
    tensors = build_inputs("m", [TensorSpec("text", "BYTES", (2, 32))], {})
    data = tensors[0].data
    assert (tensors[0].datatype, data.shape, data.dtype) == ("BYTES", (2, 32), np.dtype(object))
    values = data.ravel().tolist()
    assert all(isinstance(v, bytes) and len(v) == 128 for v in values)
    assert len(set(values)) == 64  # every element its own string
    used = set(b"".join(values).decode("ascii"))
    assert used == set(STRING_CHARACTERS)  # 8192 draws cover all 66 characters
    assert set(STRING_CHARACTERS) == set(string.ascii_letters + string.digits + " .?!")


def test_string_length_sets_every_random_string() -> None:
    """Breaks if canary.string_length / --string-length stops reaching the strings."""
    tensors = build_inputs("m", [TensorSpec("text", "BYTES", (1, 3))], {}, string_length=5)
    assert [len(v) for v in tensors[0].data.ravel()] == [5, 5, 5]


def test_string_data_is_sent_in_every_element_of_every_bytes_input() -> None:
    """Breaks if string_data is not sent as UTF-8 in every element (length ignored)."""
    specs = [TensorSpec("a", "BYTES", (1, 2)), TensorSpec("b", "BYTES", (1,))]
    tensors = build_inputs("m", specs, {}, string_length=3, string_data="Grüße, Triton?")
    assert tensors[0].data.tolist() == [["Grüße, Triton?".encode()] * 2]
    assert tensors[1].data.tolist() == ["Grüße, Triton?".encode()]


def test_random_strings_are_reproducible_with_a_seed() -> None:
    """Breaks if the strings stop following the seed (runs would send different data)."""
    spec = [TensorSpec("text", "BYTES", (1, 4))]
    first = build_inputs("m", spec, {}, seed=7)[0].data.tolist()
    assert build_inputs("m", spec, {}, seed=7)[0].data.tolist() == first
    assert build_inputs("m", spec, {}, seed=8)[0].data.tolist() != first


def test_zero_mode_zeroes_numbers_but_keeps_random_strings() -> None:
    """Breaks if data: zero stops zeroing numbers only, as perf_analyzer's --zero-input."""
    specs = [TensorSpec("x", "INT32", (1, 4)), TensorSpec("text", "BYTES", (1, 1))]
    numbers, text = build_inputs("m", specs, {}, mode="zero", string_length=9)
    assert numbers.data.tolist() == [[0, 0, 0, 0]]
    value = text.data.item()
    assert len(value) == 9 and set(value.decode()) <= set(STRING_CHARACTERS)


def test_bytes_input_with_a_dynamic_dim_takes_its_shape_from_the_override() -> None:
    """Breaks if a dynamic BYTES dim is guessed instead of asked for, or the override ignored."""
    spec = [TensorSpec("text", "BYTES", (-1,))]
    with pytest.raises(PayloadError, match=r"has a dynamic dim; set canary.inputs.text.shape"):
        build_inputs("m", spec, {})
    tensors = build_inputs("m", spec, {"text": InputOverride(shape=(3,))}, string_data="hi")
    assert tensors[0].data.tolist() == [b"hi", b"hi", b"hi"]


def test_a_bytes_sample_file_wins_over_string_data(tmp_path: Path) -> None:
    """Breaks if string settings override a sample file the user gave for that input."""
    spec = [TensorSpec("text", "BYTES", (1, 2))]
    sample = tmp_path / "text.json"
    sample.write_text('[["hello", "world"]]')
    tensors = build_inputs(
        "m", spec, {"text": InputOverride(file=sample)}, string_data="ignored", string_length=1
    )
    assert tensors[0].data.tolist() == [[b"hello", b"world"]]


def test_npy_sample_is_sent_as_is_and_checked_against_the_shape(tmp_path: Path) -> None:
    """Breaks if an .npy sample is altered, or one of the wrong shape is sent anyway."""
    sample = tmp_path / "x.npy"
    np.save(sample, np.arange(8, dtype=np.float32).reshape(1, 8))
    spec = [TensorSpec("x", "FP32", (1, 8))]
    tensors = build_inputs("m", spec, {"x": InputOverride(file=sample)})
    assert tensors[0].data.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]
    with pytest.raises(PayloadError, match=r"sample shape \[1, 8\] does not fit \[1, 4\]"):
        build_inputs("m", [TensorSpec("x", "FP32", (1, 4))], {"x": InputOverride(file=sample)})


def test_override_for_an_unknown_input_is_named() -> None:
    """Breaks if an override for an input the model lacks is not named with the real ones."""
    with pytest.raises(PayloadError) as caught:
        build_inputs("m", [TensorSpec("x", "FP32", (1,))], {"y": InputOverride(shape=(1,))})
    assert str(caught.value) == "model 'm', input 'y': no such input (the model has: x)"


def test_random_data_is_reproducible_with_a_seed() -> None:
    """Breaks if one seed does not give the same random data, or two seeds give the same."""
    spec = [TensorSpec("x", "FP32", (1, 16))]
    first = build_inputs("m", spec, {}, seed=7)[0].data
    again = build_inputs("m", spec, {}, seed=7)[0].data
    other = build_inputs("m", spec, {}, seed=8)[0].data
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("datatype", ["UINT8", "INT8", "INT16", "UINT32", "INT64", "UINT64"])
def test_random_integers_stay_between_0_and_100(datatype: str) -> None:
    """Breaks if random integer inputs leave 0..100 (token ids, indices) or stop varying."""
    values = build_inputs("m", [TensorSpec("x", datatype, (1, 5000))], {})[0].values()
    assert min(values) == 0 and max(values) == 100  # type: ignore[type-var]
    assert len(set(values)) == 101


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64", "BF16"])
def test_random_floats_are_float32_draws_in_the_unit_interval(datatype: str) -> None:
    """Breaks if random floats leave [0, 1] (FP16/BF16 may round up to 1, as numpy's
    cast of float32 draws did) or are not FP32 draws for FP32 and FP64."""
    values = build_inputs("m", [TensorSpec("x", datatype, (1, 500))], {})[0].values()
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in values)
    assert len(set(values)) > (50 if datatype == "BF16" else 400)
    if datatype in ("FP32", "FP64"):
        assert all(v < 1.0 and (v * 2**24).is_integer() for v in values)  # type: ignore[operator]


def test_a_float64_npy_sample_is_cast_and_a_float_sample_for_integers_refused(
    tmp_path: Path,
) -> None:
    """Breaks if a float64 .npy (numpy's default) is sent as 8-byte elements for FP32
    (Triton refuses the size), or floats are silently truncated into an INT32 input."""
    sample = tmp_path / "x.npy"
    np.save(sample, np.array([[0.5, 1.25]]))
    tensor = build_inputs("m", [TensorSpec("x", "FP32", (1, 2))], {"x": InputOverride(file=sample)})
    assert tensor[0].raw == np.array([[0.5, 1.25]], dtype=np.float32).tobytes()
    with pytest.raises(PayloadError, match="holds float64, which is no INT32"):
        build_inputs("m", [TensorSpec("x", "INT32", (1, 2))], {"x": InputOverride(file=sample)})


@pytest.mark.parametrize(
    ("array", "sent"),
    [
        (np.array([b"ab", b"c"]), [b"ab", b"c"]),
        (np.array(["ab", "é"]), [b"ab", "é".encode()]),
        (np.array([b"x", "y"], dtype=object), [b"x", b"y"]),
    ],
)
def test_bytes_samples_of_any_string_dtype_are_sent_as_their_bytes(
    array: np.ndarray, sent: list[bytes]
) -> None:
    """Breaks if fixed-width bytes or str arrays (np.save of a list of strings) are not
    sent as their elements' UTF-8, as tritonclient sends object arrays."""
    tensor = Tensor.from_numpy("t", "BYTES", array)
    assert tensor.values() == sent
    assert tensor.data.tolist() == sent
