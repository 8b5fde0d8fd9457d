"""A Python-backend identity model with a known service time, for tests against real Triton.

Every model in this repository links its ``1/model.py`` here. What it does comes from the
model's own config ``parameters`` (so a test changes it through the repository load API,
without new files):

* ``base_ms`` / ``per_item_ms``: each execution sleeps ``base_ms + per_item_ms * rows``,
  where ``rows`` counts every row of every request in the batch Triton formed. That is the
  service time the tests know.
* ``fail_ratio``: the share of requests answered with an error (0 by default), spread
  evenly and counted, never drawn at random: with ratio ``r`` (read as an exact
  fraction), the instance's ``n``-th request fails when ``floor(n * r)`` goes up, so at
  ``0.2`` requests 5, 10, 15, … fail and no two fail in a row (a request failed for a
  negative input is not counted). The count is per model instance, from its load: a
  test that needs exact totals gives the model one instance and reloads it first.
* A numeric input holding a negative value fails that request on demand (the canary's
  random data lies in [0, 1), so it never does by accident).
* ``decoupled`` models (``model_transaction_policy {decoupled: true}``) stream
  ``tokens`` responses: the first after ``first_token_ms``, then one every ``token_gap_ms``.
  A ``max_tokens`` input, when the request sends it, sets that count instead (as an LLM's
  does). ``fail_after`` >= 0 sends an error response (the final one) once that many
  tokens are out: the mid-stream error a client must notice.

Each output mirrors the input of the same position, so a client can check what it got.
An optional input the request leaves out is answered with the first input in its place:
every output is always there, as a real model answers every output it lists.
"""

import json
import math
import time
from fractions import Fraction

import numpy as np
import triton_python_backend_utils as pb_utils


def _parameter(config, name, default):
    entry = config.get("parameters", {}).get(name)
    return float(entry["string_value"]) if entry else default


class TritonPythonModel:
    """Sleeps for the configured service time and echoes its inputs."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [entry["name"] for entry in config["input"]]
        self.outputs = [entry["name"] for entry in config["output"]]
        self.base_s = _parameter(config, "base_ms", 0.0) / 1000
        self.per_item_s = _parameter(config, "per_item_ms", 0.0) / 1000
        entry = config.get("parameters", {}).get("fail_ratio")
        self.fail_ratio = Fraction(entry["string_value"]) if entry else Fraction(0)
        self.answered = 0
        """Requests this instance has answered (or failed): what ``fail_ratio`` counts."""
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.tokens = int(_parameter(config, "tokens", 8))
        self.first_token_s = _parameter(config, "first_token_ms", 0.0) / 1000
        self.token_gap_s = _parameter(config, "token_gap_ms", 0.0) / 1000
        self.fail_after = int(_parameter(config, "fail_after", -1))

    def _rows(self, request):
        if not self.batching:
            return 1
        tensor = pb_utils.get_input_tensor_by_name(request, self.inputs[0])
        return int(tensor.as_numpy().shape[0]) if tensor is not None else 1

    def _answer(self, request):
        arrays = []
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            arrays.append(None if tensor is None else tensor.as_numpy())
        arrays = [arrays[0] if array is None else array for array in arrays]
        for array in arrays:
            if array is not None and array.dtype.kind in "fiu" and (array < 0).any():
                return pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative input: failure asked for")
                )
        self.answered += 1
        if math.floor(self.answered * self.fail_ratio) > math.floor(
            (self.answered - 1) * self.fail_ratio
        ):
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError("fail_ratio: failure asked for")
            )
        tensors = [
            pb_utils.Tensor(name, array)
            for name, array in zip(self.outputs, arrays, strict=True)
            if array is not None
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self._stream(request)
            return None
        rows = sum(self._rows(request) for request in requests)
        time.sleep(self.base_s + self.per_item_s * rows)
        return [self._answer(request) for request in requests]

    def _token_count(self, request):
        """The request's ``max_tokens`` when it sends one, else the ``tokens`` parameter."""
        tensor = pb_utils.get_input_tensor_by_name(request, "max_tokens")
        if tensor is None:
            return self.tokens
        return int(tensor.as_numpy().reshape(-1)[0])

    def _stream(self, request):
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        time.sleep(self.first_token_s)
        for index in range(self._token_count(request)):
            if index:
                time.sleep(self.token_gap_s)
            if index == self.fail_after:
                failure = f"fail_after: failure asked for after {index} tokens"
                error = pb_utils.TritonError(failure)
                sender.send(pb_utils.InferenceResponse(error=error), flags=final)
                return
            token = np.array([f"token{index}".encode()], dtype=np.object_)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(self.outputs[0], token)]))
        sender.send(flags=final)
