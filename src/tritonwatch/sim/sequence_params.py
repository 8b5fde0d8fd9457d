"""The sequence parameters of a request and an ensemble response, on HTTP and gRPC.

Triton's frontends read ``sequence_id``, ``sequence_start`` and ``sequence_end`` from
every request (whatever the model) and refuse a mistyped one with their own texts
(real tritonserver 2.51):

* HTTP (the JSON ``parameters``): ``sequence_id`` must be an unsigned integer or a
  string, each flag a boolean; otherwise INTERNAL (500) ``Unable to parse '<key>':
  attempt to access JSON non-string as string`` (the id) or ``... non-boolean as
  boolean`` (a flag), as RapidJSON words it;
* gRPC (``ModelInferRequest.parameters``): the id an ``int64_param`` (read as unsigned)
  or a ``string_param``, each flag a ``bool_param``; otherwise INVALID_ARGUMENT
  ``invalid value type for '<key>' parameter, expected int64_param or string_param.``
  (or ``expected bool_param.``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.sequences import SequenceFlags

FLAGS = ("sequence_start", "sequence_end")


def _unparsable(key: str, kind: str) -> SimError:
    return SimError(
        ErrorCode.INTERNAL, f"Unable to parse '{key}': attempt to access JSON non-{kind} as {kind}"
    )


def http_sequence_flags(parameters: Mapping[str, Any]) -> SequenceFlags:
    """The flags of an HTTP request's ``parameters`` object.

    Raises:
        SimError: INTERNAL with Triton's parse error for a mistyped value.
    """
    sequence_id = parameters.get("sequence_id", 0)
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, int | str):
        raise _unparsable("sequence_id", "string")
    if isinstance(sequence_id, int) and not 0 <= sequence_id < 2**64:
        raise _unparsable("sequence_id", "string")
    flags = []
    for key in FLAGS:
        value = parameters.get(key, False)
        if not isinstance(value, bool):
            raise _unparsable(key, "boolean")
        flags.append(value)
    return SequenceFlags(sequence_id, flags[0], flags[1])


def grpc_sequence_flags(parameters: Any) -> SequenceFlags:
    """The flags of a ``ModelInferRequest``'s parameters map.

    Raises:
        SimError: INVALID_ARG with Triton's text for a parameter of the wrong type.
    """
    sequence_id: int | str = 0
    if "sequence_id" in parameters:
        parameter = parameters["sequence_id"]
        kind = parameter.WhichOneof("parameter_choice")
        if kind == "int64_param":
            sequence_id = parameter.int64_param % 2**64
        elif kind == "string_param":
            sequence_id = parameter.string_param
        else:
            raise SimError(
                ErrorCode.INVALID_ARG,
                "invalid value type for 'sequence_id' parameter, expected int64_param or "
                "string_param.",
            )
    flags = []
    for key in FLAGS:
        value = False
        if key in parameters:
            parameter = parameters[key]
            if parameter.WhichOneof("parameter_choice") != "bool_param":
                raise SimError(
                    ErrorCode.INVALID_ARG,
                    f"invalid value type for '{key}' parameter, expected bool_param.",
                )
            value = parameter.bool_param
        flags.append(value)
    return SequenceFlags(sequence_id, flags[0], flags[1])


def set_grpc_parameters(reply: Any, parameters: Mapping[str, int | str | bool]) -> None:
    """Writes response parameters into a ``ModelInferResponse`` (an id as
    ``int64_param`` or ``string_param``, flags as ``bool_param``)."""
    for key, value in parameters.items():
        if isinstance(value, bool):
            reply.parameters[key].bool_param = value
        elif isinstance(value, int):
            reply.parameters[key].int64_param = value - 2**64 if value >= 2**63 else value
        else:
            reply.parameters[key].string_param = value
