"""HttpAnswerDecoder: a canary's repeated answers read from the last good header's layout,
and every other answer decoded in full, with the full decoder's outcome and error text."""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
from typing import Any

import pytest

from canary_record_support import (
    library_answers,
    prepared,
    scripted_client,
    total_outcomes,
    until,
)
from tritonwatch.kserve.infer_response import (
    MAX_REMEMBERED_HEADER_BYTES,
    HttpAnswerDecoder,
    InferResponse,
    ResponseDecodeError,
    decode_http_infer_response,
)
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.observations import Outcome
from tritonwatch.state.canary_board import CanaryBoard
from tritonwatch.wire.datatypes import serialize_bytes


def _answer(outputs: list[dict[str, Any]], *binary: bytes) -> tuple[bytes, int]:
    """(body, header length) of a binary-tensor answer: ``outputs`` then ``binary``."""
    header = json.dumps({"model_name": "m", "model_version": "1", "outputs": outputs}).encode()
    return header + b"".join(binary), len(header)


def _fp32(name: str, count: int) -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": [1, count],
            "parameters": {"binary_data_size": 4 * count}}  # fmt: skip


def _floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def _contents(response: InferResponse) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    return {name: (t.datatype, t.shape, t.raw) for name, t in response.tensors.items()}


def _full_error(body: bytes, header_length: int | None) -> str:
    with pytest.raises(ResponseDecodeError) as caught:
        decode_http_infer_response(body, header_length)
    return str(caught.value)


def test_a_repeated_header_gives_this_answers_values_as_the_full_decoder_does() -> None:
    """Breaks if an answer read from the remembered layout keeps the last answer's bytes,
    its stamp, or differs from a full decode (a duplicate name keeps the first)."""
    decoder = HttpAnswerDecoder()
    outputs = [_fp32("y", 2), _fp32("z", 1), _fp32("y", 1)]
    first, length = _answer(outputs, _floats(1, 2), _floats(3), _floats(4))
    second, _ = _answer(outputs, _floats(5, 6), _floats(7), _floats(8))
    assert _contents(decoder.decode(first, length, None, 1.0)) == _contents(
        decode_http_infer_response(first, length)
    )
    repeated = decoder.decode(second, str(length), None, 2.0)
    assert repeated.received_at == 2.0
    assert _contents(repeated) == _contents(decode_http_infer_response(second, length))
    assert repeated.tensors["y"].values() == [5.0, 6.0]
    assert repeated.tensors["z"].values() == [7.0]


def test_a_changed_header_is_decoded_in_full() -> None:
    """Breaks if an answer whose header changed (another shape, JSON data) is read with
    the remembered layout instead of its own."""
    decoder = HttpAnswerDecoder()
    first, length = _answer([_fp32("y", 2)], _floats(1, 2))
    decoder.decode(first, length)
    wider, wider_length = _answer([_fp32("y", 3)], _floats(1, 2, 3))
    assert decoder.decode(wider, wider_length).tensors["y"].shape == (1, 3)
    json_body = json.dumps(
        {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1], "data": [9.0]}]}
    ).encode()
    assert decoder.decode(json_body).tensors["y"].values() == [9.0]
    renamed, renamed_length = _answer([_fp32("w", 3)], _floats(1, 2, 3))
    assert set(decoder.decode(renamed, renamed_length).tensors) == {"w"}


def test_a_json_answer_repeated_or_changed_reads_its_own_data() -> None:
    """Breaks if an all-JSON answer's data (in the header itself) is taken from the
    last answer when it changed, or the repeated one differs from a full decode."""
    decoder = HttpAnswerDecoder()

    def body(value: float) -> bytes:
        entry = {"name": "y", "datatype": "FP32", "shape": [1], "data": [value]}
        return json.dumps({"outputs": [entry]}).encode()

    assert decoder.decode(body(1.0)).tensors["y"].values() == [1.0]
    assert decoder.decode(body(1.0)).tensors["y"].values() == [1.0]
    assert decoder.decode(body(2.5)).tensors["y"].values() == [2.5]


@pytest.mark.parametrize(
    "binary", [_floats(1), _floats(1, 2, 3), b""], ids=["short", "long", "none"]
)
def test_a_wrong_length_binary_part_after_a_good_answer_raises_as_a_full_decode(
    binary: bytes,
) -> None:
    """Breaks if the remembered layout slices a binary part of another length (a short
    one must stay a bad response, with the full decoder's text; a long one reads as the
    full decoder reads it)."""
    decoder = HttpAnswerDecoder()
    good, length = _answer([_fp32("y", 2)], _floats(1, 2))
    decoder.decode(good, length)
    body = good[:length] + binary
    if len(binary) < 8:
        with pytest.raises(ResponseDecodeError) as caught:
            decoder.decode(body, length)
        assert str(caught.value) == _full_error(body, length)
        assert "runs past" in str(caught.value)
    else:
        assert _contents(decoder.decode(body, length)) == _contents(
            decode_http_infer_response(body, length)
        )


def test_a_bytes_output_is_checked_again_with_the_same_header() -> None:
    """Breaks if a BYTES output (its element lengths are in the binary part) is sliced
    without reading it: a broken length prefix of the same size must still be refused."""
    decoder = HttpAnswerDecoder()
    data = serialize_bytes([b"ab", b"cd"])
    entry = {"name": "s", "datatype": "BYTES", "shape": [2],
             "parameters": {"binary_data_size": len(data)}}  # fmt: skip
    good, length = _answer([entry], data)
    assert decoder.decode(good, length).tensors["s"].values() == [b"ab", b"cd"]
    other, _ = _answer([entry], serialize_bytes([b"xy", b"zw"]))
    assert decoder.decode(other, length).tensors["s"].values() == [b"xy", b"zw"]
    broken = good[:length] + struct.pack("<I", 7) + data[4:]  # the first runs past the end
    with pytest.raises(ResponseDecodeError) as caught:
        decoder.decode(broken, length)
    assert str(caught.value) == _full_error(broken, length)


def test_a_compressed_answer_repeats_from_its_inflated_header() -> None:
    """Breaks if a gzip answer's layout is compared on the compressed bytes (which
    change with the data) or the repeated answer keeps the last one's values."""
    decoder = HttpAnswerDecoder()
    first, length = _answer([_fp32("y", 1)], _floats(1))
    second, _ = _answer([_fp32("y", 1)], _floats(2))
    decoder.decode(gzip.compress(first), length, "gzip")
    assert decoder.decode(gzip.compress(second), length, "gzip").tensors["y"].values() == [2.0]


def test_a_long_header_is_not_kept() -> None:
    """Breaks if a header past MAX_REMEMBERED_HEADER_BYTES is kept per model (a JSON
    answer of megabytes would stay in memory for every canary)."""
    decoder = HttpAnswerDecoder()
    entry = {"name": "y", "datatype": "FP32", "shape": [1024], "data": [0.5] * 1024}
    body = json.dumps({"outputs": [entry]}).encode()
    assert len(body) > MAX_REMEMBERED_HEADER_BYTES
    assert decoder.decode(body).tensors["y"].values() == [0.5] * 1024
    assert decoder._header is None


def test_the_engines_canary_counts_a_short_answer_after_a_good_one_as_a_bad_response() -> None:
    """Breaks if the canary's engine path reads a repeated header's short binary part as a
    success: it must record bad_response with the decoder's text (the library, asked for
    a second opinion, cannot read it either)."""
    plan = CanaryPlan("t", "m", "", "http", "http://127.0.0.1:1", "", 1.0, False, 1.0, 4, "zero")
    stats = CanaryBoard(wall_clock=lambda: 1_700_000_000.0)
    stats.declare([plan.key])
    client = scripted_client(plan)

    def library_cannot_read(_timeout: float) -> Any:
        raise ResponseDecodeError("the library could not read it either")

    library_answers(client, library_cannot_read)
    good, length = _answer([_fp32("y", 2)], _floats(1, 2))
    headers = {"inference-header-content-length": str(length)}

    async def record() -> None:
        canary = await prepared(plan, client, stats)
        canary.record(0.0, (200, headers, good, 0.001), 0.0)
        canary.record(1.0, (200, headers, good[:-4], 1.001), 1.0)
        await until(lambda: total_outcomes(stats) == 2, "both outcomes")

    asyncio.run(record())
    series = stats.snapshot(2.0)[0]
    assert series.outcomes[str(Outcome.SUCCESS)] == 1
    assert series.outcomes[str(Outcome.BAD_RESPONSE)] == 1
    assert series.last_error is not None
    assert series.last_error.error == _full_error(good[:-4], length)


def test_the_decoder_keeps_no_answers_binary_data() -> None:
    """Breaks if the remembered layout holds the last answer's binary tensor bytes (a
    model with megabytes of output would keep them per canary for ever)."""
    decoder = HttpAnswerDecoder()
    big, length = _answer([_fp32("y", 1 << 16)], bytes(4 << 16))
    assert len(decoder.decode(big, length).tensors["y"].raw) == 4 << 16
    assert [slot.tensor.raw for slot in decoder._slots] == [b""]
    assert len(decoder.decode(big, length).tensors["y"].raw) == 4 << 16
