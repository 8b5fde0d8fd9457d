"""A BLS model for tests against real Triton: its own Python, then calls of ``core``.

Each request sleeps ``own_ms`` (its own work), then sends its input through ``core``
``calls`` times, one call after the other, each a ``pb_utils.InferenceRequest(...).exec()``:
an ordinary request on ``core``, queued and batched there like any other. The answer is
core's last output (an identity, so the input comes back).
"""

import json
import time

import triton_python_backend_utils as pb_utils


def _parameter(config, name, default):
    entry = config.get("parameters", {}).get(name)
    return float(entry["string_value"]) if entry else default


class TritonPythonModel:
    """``own_ms`` of its own, then ``calls`` sequential calls of ``core``."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.own_s = _parameter(config, "own_ms", 1.0) / 1000
        self.calls = int(_parameter(config, "calls", 2))

    def _answer(self, request):
        tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        time.sleep(self.own_s)
        for _ in range(self.calls):
            child = pb_utils.InferenceRequest(
                model_name="core",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", tensor.as_numpy())],
            )
            response = child.exec()
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            output = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
            tensor = pb_utils.Tensor("INPUT0", output.as_numpy())
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor.as_numpy())])

    def execute(self, requests):
        return [self._answer(request) for request in requests]
