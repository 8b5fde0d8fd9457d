"""A test model that refuses synthetic input, as a model fed by a tokenizer does.

It answers ``INVALID_ARG`` (HTTP 400, gRPC INVALID_ARGUMENT: the client's request is
wrong, not the server) unless TOKENS holds at least 8 token ids, all in [1000, 2000);
otherwise SCORE is the ids' mean. ~1 ms of work per request.
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

MIN_TOKENS = 8
VOCABULARY = range(1000, 2000)


class TritonPythonModel:
    def _answer(self, request):
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS").as_numpy().reshape(-1)
        if len(tokens) < MIN_TOKENS or not all(int(t) in VOCABULARY for t in tokens):
            text = (
                f"refuses: TOKENS must hold at least {MIN_TOKENS} token ids in "
                f"[{VOCABULARY.start}, {VOCABULARY.stop}), got {tokens[:4].tolist()}"
            )
            error = pb_utils.TritonError(text, pb_utils.TritonError.INVALID_ARG)
            return pb_utils.InferenceResponse(error=error)
        score = np.array([tokens.mean()], dtype=np.float32)
        return pb_utils.InferenceResponse([pb_utils.Tensor("SCORE", score)])

    def execute(self, requests):
        time.sleep(0.001)
        return [self._answer(request) for request in requests]
