"""Triton's "simple" example model for the Python backend: sum and difference of two
INT32 vectors, one response per request (the batch dimension passes through)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Triton calls ``execute`` with the requests of one batch."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(np.int32)),
                pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(np.int32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
