"""A stateful test model: Triton's sequence batcher fills START, END and CORRID.

Each request is checked as a stateful model would need it: a correlation id of 0 is
refused, and so is a request of a sequence whose START this instance never saw (or
whose END it already saw). State is a count of requests per open sequence; the answer
echoes INPUT0. ~1 ms of work per execution (``base_ms``).
"""

import json
import time

import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0].item()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        entry = config.get("parameters", {}).get("base_ms")
        self.base_s = float(entry["string_value"]) / 1000 if entry else 0.0
        self.open = {}
        """Correlation id -> requests seen in its open sequence."""

    def _answer(self, request):
        corrid, start, end = (_scalar(request, n) for n in ("CORRID", "START", "END"))
        if not corrid:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(f"seq: correlation id {corrid!r} is no sequence")
            )
        if start:
            self.open[corrid] = 0
        elif corrid not in self.open:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(f"seq: sequence {corrid} was never started")
            )
        self.open[corrid] += 1
        if end:
            del self.open[corrid]
        data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)])

    def execute(self, requests):
        time.sleep(self.base_s)
        return [self._answer(request) for request in requests]
