"""perf_analyzer's ``--input-data`` JSON, read for ``canary.input_data`` (config/input_data.py)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from tritonwatch.config.input_data import InputDataError, SampleInput, read_input_data

TOKENS = list(range(1000, 1008))
TOKENS_B64 = base64.b64encode(struct.pack("<8q", *TOKENS)).decode()


def _file(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_the_three_forms_of_perf_analyzers_docs_are_read(tmp_path: Path) -> None:
    """Breaks if a flat list, content with shape (values or b64) or a bare b64 is read
    otherwise than perf_analyzer's docs describe, or validation_data is refused."""
    path = _file(
        tmp_path,
        {
            "data": [
                {"TOKENS": TOKENS, "MASK": [[1, 1], [0, 1]]},
                {"TOKENS": {"content": TOKENS, "shape": [8]}},
                {"TOKENS": {"b64": TOKENS_B64}},
                {"TOKENS": {"content": {"b64": TOKENS_B64}, "shape": [2, 4]}},
            ],
            "validation_data": [{"OUT": [1]}],
        },
    )
    samples = read_input_data(path)
    raw = struct.pack("<8q", *TOKENS)
    assert samples == (
        {"TOKENS": SampleInput(values=tuple(TOKENS)), "MASK": SampleInput(values=(1, 1, 0, 1))},
        {"TOKENS": SampleInput(values=tuple(TOKENS), shape=(8,))},
        {"TOKENS": SampleInput(raw=raw)},
        {"TOKENS": SampleInput(raw=raw, shape=(2, 4))},
    )


def test_streams_are_read_one_after_another(tmp_path: Path) -> None:
    """Breaks if perf_analyzer's sequence streams (lists of samples) are not flattened
    in order."""
    path = _file(tmp_path, {"data": [[{"IN": ["1"]}, {"IN": ["2"]}], [{"IN": ["3"]}]]})
    assert [s["IN"].values for s in read_input_data(path)] == [("1",), ("2",), ("3",)]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1], 'must be a JSON object with a "data" list, got: [1]'),
        ({"data": []}, '"data" holds no sample'),
        ({"data": {"IN": [1]}}, '"data" must be a list, got: {"IN": [1]}'),
        (
            {"data": [], "samples": 1},
            'has a key perf_analyzer does not read (allowed: "data", '
            "\"validation_data\"), got: 'samples'",
        ),
        ({"data": [{"IN": [1]}, 7]}, "sample 1: must be an object of input names, got: 7"),
        (
            {"data": [{"IN": [1, None]}]},
            "sample 0, input 'IN': each element must be a number, true/false or a string, got: null",
        ),
        (
            {"data": [{"IN": {"b64": "not base64!"}}]},
            "sample 0, input 'IN': \"b64\" is no valid base64, got: 'not base64!'",
        ),
        (
            {"data": [{"IN": {"content": [1], "shape": [-1]}}]},
            "sample 0, input 'IN': \"shape\" must be a list of whole numbers, 0 or more, got: [-1]",
        ),
        (
            {"data": [{"IN": {"shape": [1]}}]},
            'sample 0, input \'IN\': has no "content" (nor "b64"), got: {"shape": [1]}',
        ),
        (
            {"data": [{"IN": {"contents": [1]}}]},
            "sample 0, input 'IN': has a key perf_analyzer does not read (allowed: content, shape, "
            "b64), got: 'contents'",
        ),
        (
            {"data": [{"IN": 5}]},
            "sample 0, input 'IN': must be a list of elements, or an object with \"content\" or "
            '"b64", got: 5',
        ),
    ],
)
def test_a_bad_file_names_the_sample_the_input_and_the_value(
    tmp_path: Path, document: object, message: str
) -> None:
    """Breaks if a mistake is reported without the file, the sample, the input and
    the value at fault."""
    path = _file(tmp_path, document)
    with pytest.raises(InputDataError) as caught:
        read_input_data(path)
    separator = ", " if message.startswith("sample") else ": "
    assert str(caught.value) == f"{path}{separator}{message}"


def test_unreadable_and_non_json_files_say_so(tmp_path: Path) -> None:
    """Breaks if a missing file or one that is no JSON gives anything but a one-line
    reason naming it."""
    missing = tmp_path / "missing.json"
    with pytest.raises(InputDataError, match="cannot read the file: No such file or directory"):
        read_input_data(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(InputDataError) as caught:
        read_input_data(broken)
    assert str(caught.value).startswith(f"{broken}: is no JSON: ")
