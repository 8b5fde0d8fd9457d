"""The HTTP inference request and response: JSON header, binary tensors, Triton's errors.

Triton's HTTP frontend reads the request with its JSON library before the core checks it
against the model, and the two fail differently: a member that is missing or of the
wrong JSON type is INTERNAL (500, ``Unable to parse '<member>': ...``), while what the
protocol itself forbids (no data, an unknown datatype, binary data cut short) is
INVALID_ARG (400). This module reproduces that first stage, in Triton's order; the core's
checks live in ``tensors.prepare_inputs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.repository import InferOutcome
from tritonwatch.sim.sequence_params import http_sequence_flags
from tritonwatch.sim.sequences import NO_SEQUENCE, SequenceFlags
from tritonwatch.sim.tensors import (
    RequestInput,
    datatype_info,
    decode_json,
    encode_binary,
    encode_json,
    wire_type,
)

HEADER_LENGTH = "Inference-Header-Content-Length"
_DATA_FIELDS = "'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'"


def _unparsable(member: str, problem: str) -> SimError:
    return SimError(ErrorCode.INTERNAL, f"Unable to parse '{member}': {problem}")


def _missing(member: str) -> SimError:
    return _unparsable(member, f"attempt to access non-existing object member '{member}'")


def _not_a(member: str, kind: str) -> SimError:
    return _unparsable(member, f"attempt to access JSON non-{kind} as {kind}")


def _invalid(message: str) -> SimError:
    return SimError(ErrorCode.INVALID_ARG, message)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class InferRequest:
    """A parsed HTTP inference request."""

    request_id: str
    """The request's ``id`` ("" when absent); echoed in the response and in errors."""
    has_id: bool
    inputs: list[RequestInput]
    outputs: list[tuple[str, bool]]
    """Requested outputs with their ``binary_data`` flag (empty: every output)."""
    binary_default: bool
    sequence: SequenceFlags = NO_SEQUENCE
    """The correlation id and START/END flags of the request's ``parameters``."""


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """The JSON header and the binary tensors after it (``Inference-Header-Content-Length``)."""
    if header_length is None:
        return body, memoryview(b"")
    if not header_length.isdigit() or int(header_length) > len(body):
        raise _invalid(
            f"{HEADER_LENGTH} must be a byte count within the body, got: {header_length!r}"
        )
    split = int(header_length)
    return body[:split], memoryview(body)[split:]


def parse_request(header: bytes, binary: memoryview, model: str) -> InferRequest:
    """Reads the JSON header and attaches binary tensors, failing as Triton does."""
    try:
        document = json.loads(header)
    except ValueError as error:
        raise SimError(
            ErrorCode.INTERNAL, f"failed to parse the request JSON buffer: {error}"
        ) from None
    if not isinstance(document, dict):
        raise _missing("inputs")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise _not_a("id", "string")
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise SimError(
            ErrorCode.INTERNAL,
            "failed to get request params.: attempt to get members for non-object",
        )
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise _not_a("binary_data_output", "boolean")
    sequence = http_sequence_flags(parameters)
    if "inputs" not in document:
        raise _missing("inputs")
    tensors = document["inputs"]
    if not isinstance(tensors, list):
        raise _not_a("inputs", "array")
    inputs = []
    offset = 0
    for tensor in tensors:
        parsed, offset = _parse_input(tensor, binary, offset, model)
        inputs.append(parsed)
    return InferRequest(
        request_id,
        "id" in document,
        inputs,
        _parse_outputs(document.get("outputs"), binary_default),
        binary_default,
        sequence,
    )


def _parse_input(
    tensor: object, binary: memoryview, offset: int, model: str
) -> tuple[RequestInput, int]:
    if not isinstance(tensor, dict):
        raise _invalid(
            f"Input must set only one of the following fields: {_DATA_FIELDS}. But no field is set"
        )
    for member, kind in (("name", "string"), ("datatype", "string"), ("shape", "array")):
        if member not in tensor:
            raise _missing(member)
        if not isinstance(tensor[member], str if kind == "string" else list):
            raise _not_a(member, kind)
    name, datatype, shape = tensor["name"], tensor["datatype"], tensor["shape"]
    if not all(_is_count(dim) for dim in shape):
        raise _not_a("shape", "unsigned-integer")
    parameters = tensor.get("parameters")
    parameters = parameters if isinstance(parameters, dict) else {}
    size = parameters.get("binary_data_size")
    if size is not None and not _is_count(size):
        raise _not_a("binary_data_size", "unsigned-integer")
    given = [
        field
        for field, present in (
            ("data", "data" in tensor),
            ("binary_data_size", size is not None),
            ("shared_memory_region", "shared_memory_region" in parameters),
        )
        if present
    ]
    if len(given) != 1:
        said = "no field is set" if not given else "set " + " ".join(f"'{f}'" for f in given)
        raise _invalid(
            f"Input must set only one of the following fields: {_DATA_FIELDS}. But {said}"
        )
    if given[0] == "shared_memory_region":  # none can be registered with the simulator
        region = parameters["shared_memory_region"]
        raise SimError(ErrorCode.NOT_FOUND, f"Unable to find shared memory region: '{region}'")
    if size is None:
        array = decode_json(name, datatype, shape, tensor["data"])
        return RequestInput(name, datatype, tuple(shape), array=array), offset
    datatype_info(name, datatype)  # checked before the sizes, as Triton does
    if offset + size > len(binary):
        raise _invalid(
            f"unexpected size for input '{name}', expecting {offset + size - len(binary)} "
            f"additional bytes for model '{model}'"
        )
    raw = binary[offset : offset + size]
    return RequestInput(name, datatype, tuple(shape), raw=raw), offset + size


def _parse_outputs(outputs: object, binary_default: bool) -> list[tuple[str, bool]]:
    if outputs is None:
        return []
    if not isinstance(outputs, list):
        raise _not_a("outputs", "array")
    selection = []
    for output in outputs:
        if not isinstance(output, dict) or "name" not in output:
            raise _missing("name")
        if not isinstance(output["name"], str):
            raise _not_a("name", "string")
        parameters = output.get("parameters")
        parameters = parameters if isinstance(parameters, dict) else {}
        if "classification" in parameters:
            raise _invalid("the simulator does not support the classification extension")
        flag = parameters.get("binary_data", binary_default)
        if not isinstance(flag, bool):
            raise _not_a("binary_data", "boolean")
        selection.append((output["name"], flag))
    return selection


def encode_response(request: InferRequest, outcome: InferOutcome) -> tuple[bytes, int | None]:
    """The response body and, when binary tensors follow the JSON, the JSON's length."""
    spec = outcome.spec
    known = {tensor.name: tensor for tensor in spec.output}
    selection = request.outputs or [(name, request.binary_default) for name in known]
    outputs, chunks = [], []
    for name, binary in selection:
        datatype = wire_type(known[name].data_type)
        array = outcome.outputs[name]
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = encode_binary(datatype, array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = encode_json(datatype, array)
        outputs.append(entry)
    reply: dict[str, Any] = {}
    if request.has_id:
        reply["id"] = request.request_id
    reply.update(model_name=spec.name, model_version=spec.version_label)
    if outcome.parameters is not None:
        reply["parameters"] = outcome.parameters
    reply["outputs"] = outputs
    text = json.dumps(reply, separators=(",", ":")).encode()
    if not chunks:
        return text, None
    return b"".join((text, *chunks)), len(text)
