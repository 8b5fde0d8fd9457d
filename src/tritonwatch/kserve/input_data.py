"""``canary.input_data`` samples made into request tensors for one model.

The file is read as perf_analyzer reads it (:mod:`tritonwatch.config.input_data`, which
the config check already ran); here each sample meets the model's inputs
(:func:`~tritonwatch.kserve.payload.input_specs`):

* an input a sample gives is sent as the sample says: its elements packed as the
  input's datatype (integers for integer inputs, numbers for float inputs, ``true``/
  ``false`` or 0/1 for BOOL, strings for BYTES) or its ``b64`` bytes as they are;
* its shape is the sample's ``shape`` (without the batch dimension, which is 1 for a
  batching model), else ``canary.inputs.NAME.shape``, else the model's, where one
  dynamic dim is read from the element count (two or more need a shape);
* an input a sample leaves out is filled as without the file (``canary.inputs``,
  or synthetic data), so a file may give only the inputs that matter (token ids);
* a name the model has no input for, a value the datatype cannot hold, a count that
  fits no shape: :class:`~tritonwatch.kserve.payload.PayloadError` naming the file,
  the sample, the input and the value; the canary is then skipped with that reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonwatch.config.canary_schema import InputOverride
from tritonwatch.config.input_data import InputDataError, SampleInput, read_input_data
from tritonwatch.kserve.payload import PayloadError, Tensor, TensorSpec
from tritonwatch.wire.datatypes import ElementError, element_count, pack, serialize_bytes


def load_samples(
    model: str,
    path: Path,
    specs: Sequence[TensorSpec],
    defaults: Sequence[Tensor],
    overrides: Mapping[str, InputOverride],
    *,
    batching: bool,
) -> list[tuple[Tensor, ...]]:
    """Each sample of the file at ``path`` as the tensors of one request, in the order of
    ``defaults`` (the tensors the canary sends without the file), with an optional input
    a sample gives added after them.

    Args:
        batching: the model batches (its first dim is the batch, sent as 1).

    Raises:
        PayloadError: the file cannot be read, or a sample does not fit the model.
    """
    try:
        samples = read_input_data(path)
    except InputDataError as error:
        raise PayloadError(model, error.input_name or "-", str(error)) from None
    by_name = {spec.name: spec for spec in specs}
    sent = {t.name for t in defaults}
    requests = []
    for index, sample in enumerate(samples):
        reader = _SampleReader(model, f"{path}, sample {index}: ", overrides, batching)
        for name in sample:
            if name not in by_name:
                known = ", ".join(sorted(by_name))
                reason = f"the model has no such input (it has: {known})"
                raise PayloadError(model, name, reader.where + reason)
        tensors = [
            reader.tensor(by_name[t.name], sample[t.name]) if t.name in sample else t
            for t in defaults
        ]
        tensors += [
            reader.tensor(spec, sample[spec.name])
            for spec in specs
            if spec.name in sample and spec.name not in sent
        ]
        requests.append(tuple(tensors))
    return requests


@dataclass(frozen=True, slots=True)
class _SampleReader:
    """One sample's inputs made into tensors; ``where`` starts each of its errors."""

    model: str
    where: str
    overrides: Mapping[str, InputOverride]
    batching: bool

    def fail(self, spec: TensorSpec, reason: str) -> PayloadError:
        return PayloadError(self.model, spec.name, self.where + reason)

    def tensor(self, spec: TensorSpec, given: SampleInput) -> Tensor:
        try:
            raw = given.raw if given.raw is not None else _packed(spec.datatype, given.values or ())
            count = element_count(spec.datatype, raw)
        except ElementError as error:
            raise self.fail(spec, str(error)) from None
        shape = self.shape(spec, given, count)
        if math.prod(shape) != count:
            raise self.fail(spec, f"{count} elements do not fill shape {list(shape)}")
        return Tensor(spec.name, spec.datatype, shape, raw)

    def shape(self, spec: TensorSpec, given: SampleInput, count: int) -> tuple[int, ...]:
        """The request shape of a sample's input (batch dimension included)."""
        override = self.overrides.get(spec.name)
        if given.shape is not None:
            shape = ((1,) if self.batching and spec.shape else ()) + given.shape
        elif override is not None and override.shape:
            shape = tuple(override.shape)
        else:
            shape = spec.shape
        if len(shape) != len(spec.shape) or any(
            want not in (-1, got) for want, got in zip(spec.shape, shape, strict=True)
        ):
            raise self.fail(
                spec, f"shape {list(shape)} does not fit the model's {list(spec.shape)}"
            )
        dynamic = [d for d in shape if d < 0]
        if len(dynamic) > 1:
            raise self.fail(
                spec, f'shape {list(shape)} has several dynamic dims: give the sample a "shape"'
            )
        if dynamic:
            known = math.prod(d for d in shape if d >= 0)
            if not known or count % known:
                raise self.fail(spec, f"{count} elements do not fill shape {list(shape)}")
            shape = tuple(count // known if d < 0 else d for d in shape)
        return shape


def _packed(datatype: str, values: Sequence[object]) -> bytes:
    """The elements as ``datatype``: strictly (no float into an integer input, no text
    into a number, no number into BYTES), naming the first value that does not fit."""
    for value in values:
        if not _fits(datatype, value):
            raise ElementError(f"{_shown(value)} is no {datatype} element")
    if datatype == "BYTES":
        return serialize_bytes(str(value).encode("utf-8") for value in values)
    if datatype == "BOOL":
        return bytes(1 if value else 0 for value in values)
    return pack(datatype, values)


def _fits(datatype: str, value: object) -> bool:
    if datatype == "BYTES":
        return isinstance(value, str)
    if datatype == "BOOL":
        return isinstance(value, bool) or value in (0, 1)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not datatype.startswith(("INT", "UINT")) or float(value).is_integer()


def _shown(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower()
