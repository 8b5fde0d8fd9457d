"""A plain KServe v2 JSON infer request: the form every KServe v2 server reads."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tritonwatch.kserve.payload import Tensor
from tritonwatch.wire.kserve_protobuf import Scalar


def json_request_body(
    tensors: Sequence[Tensor], parameters: Mapping[str, Scalar] | None = None
) -> tuple[bytes, dict[str, str]]:
    """A plain KServe v2 JSON request: no Triton parameter (``tritonclient`` would add
    ``binary_data_output``, an extension a server without it may refuse) but the request
    ``parameters`` given (a sequence's flags). FP16 and BF16 elements are written as the
    floats they are; BYTES elements as UTF-8 text."""
    inputs = []
    for tensor in tensors:
        values = tensor.values()
        data = [v.decode("utf-8") for v in values] if tensor.datatype == "BYTES" else values
        shape = list(tensor.shape)
        inputs.append(
            {"name": tensor.name, "shape": shape, "datatype": tensor.datatype, "data": data}
        )
    request: dict[str, object] = {"inputs": inputs}
    if parameters:
        request["parameters"] = dict(parameters)
    return json.dumps(request).encode(), {"Content-Type": "application/json"}
