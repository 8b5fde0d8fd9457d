"""Triton's gRPC answers in the shape of its HTTP answers: one reader for both protocols.

The same question (a model's config, statistics or metadata) gets two differently
printed answers. Triton's HTTP frontend prints snake_case names, every field with
its default (``"fail": {"count": 0, "ns": 0}``, ``"batch_input": []``) and int64 fields
as JSON numbers. The gRPC message, printed by protobuf's JSON printer (what
``tritonclient``'s ``as_json=True`` returns), leaves out every field at its default,
prints int64 and uint64 as decimal strings (``"max_queue_delay_microseconds":
"30000"``), and uses camelCase unless the printer was told to keep the proto's names
(``tritonclient`` 2.73 does; other printers, grpcurl and protobuf's default, do not).
The config RPC also wraps the configuration in ``{"config": ...}``.

:func:`http_form` (a message) and :func:`grpc_json_as_http` (its JSON, either naming
style) turn a gRPC answer into the HTTP answer to the same call, so everything that
reads answers — the canary, the sweep, the scrapers — is written once against the
HTTP shape. It is done by the messages' own descriptors, not by name patterns: a field
is a number exactly when the proto says int64, and map keys (a model's ``parameters``,
``metric_tags``) are user data, never renamed or converted. On Triton 2.51 the result
equals the HTTP answer field for field (``tests/fixtures/triton_grpc``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2, service_pb2

INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
"""Protobuf's 64-bit integer types, which its JSON form prints as strings."""

ANSWER_TYPES: tuple[type[Message], ...] = (
    service_pb2.ModelConfigResponse,
    model_config_pb2.ModelConfig,
    service_pb2.ModelStatisticsResponse,
    service_pb2.ModelMetadataResponse,
)
"""The answers :func:`grpc_json_as_http` recognises when it is not told which it has,
in the order tried: the first whose fields name every key of the document."""


def _repeated(field: FieldDescriptor) -> bool:
    """``is_repeated`` (protobuf ≥ 6; ``label`` is deprecated there) or ``label``."""
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _map_value(field: FieldDescriptor) -> FieldDescriptor | None:
    """The value field of a map field's entry type; None for any other field."""
    entry = field.message_type
    if field.type != FieldDescriptor.TYPE_MESSAGE or not entry.GetOptions().map_entry:
        return None
    value: FieldDescriptor = entry.fields_by_name["value"]
    return value


def _value(value: Any, field: FieldDescriptor) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE and isinstance(value, dict):
        return _numbers(value, field.message_type)
    if field.type in INT64_TYPES and isinstance(value, str):
        return int(value)
    return value


def _numbers(document: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    """``document`` (printed from a ``descriptor`` message) with int64 fields as ints."""
    for name, value in document.items():
        field = descriptor.fields_by_name.get(name)
        if field is None:
            continue
        value_field = _map_value(field)
        if value_field is not None:
            document[name] = {key: _value(item, value_field) for key, item in value.items()}
        elif _repeated(field) and isinstance(value, list):
            document[name] = [_value(item, field) for item in value]
        else:
            document[name] = _value(value, field)
    return document


def _as_dict(message: Message) -> dict[str, Any]:
    """snake_case names, every field without presence printed with its default."""
    printed: dict[str, Any]
    try:
        printed = json_format.MessageToDict(
            message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except TypeError:  # protobuf < 5.26 names the option differently
        printed = json_format.MessageToDict(
            message, preserving_proto_field_name=True, including_default_value_fields=True
        )
    return printed


def http_form(message: Message) -> dict[str, Any]:
    """A gRPC answer as Triton's HTTP API prints the answer to the same call.

    A ``ModelConfigResponse`` becomes its ``config``: the HTTP config API answers the
    configuration itself.
    """
    if isinstance(message, service_pb2.ModelConfigResponse):
        message = message.config
    return _numbers(_as_dict(message), message.DESCRIPTOR)


def _knows_every_key(answer: type[Message], document: Mapping[str, Any]) -> bool:
    fields = answer.DESCRIPTOR.fields
    names = {field.name for field in fields} | {field.json_name for field in fields}
    return all(key in names for key in document)


def answer_type(document: Mapping[str, Any]) -> type[Message]:
    """The first of :data:`ANSWER_TYPES` that has a field for every key of ``document``.

    Raises:
        ValueError: none has (the document is no answer of Triton's).
    """
    for answer in ANSWER_TYPES:
        if _knows_every_key(answer, document):
            return answer
    raise ValueError(f"not a Triton gRPC answer: unknown fields {sorted(document)[:8]}")


def grpc_json_as_http(
    document: Mapping[str, Any], answer: type[Message] | None = None
) -> dict[str, Any]:
    """A gRPC answer's JSON (camelCase or snake_case, int64 as strings) as the HTTP
    answer to the same call; ``answer`` is the message type (default: guessed by
    :func:`answer_type`).

    Raises:
        ValueError: the document is not an ``answer`` message (names the field).
    """
    message_type = answer if answer is not None else answer_type(document)
    try:
        message = json_format.ParseDict(dict(document), message_type())
    except json_format.ParseError as error:
        raise ValueError(f"not a {message_type.DESCRIPTOR.name}: {error}") from None
    return http_form(message)
