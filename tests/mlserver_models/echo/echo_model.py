"""MLServer custom runtime for the tests: returns each input unchanged as ``OUTPUT<n>``.

The canary's decoded answer can then be compared with what it sent, element for
element, on a KServe v2 server that is not Triton (no binary tensor extension, no
model config API). Runs inside MLServer's own venv (.mlserver), not ours.
"""

from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class EchoModel(MLModel):
    """INPUT0 (FP32, [-1, 16]) comes back as OUTPUT0, same dtype, shape and values."""

    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        outputs = [
            NumpyCodec.encode_output(
                name=request_input.name.replace("INPUT", "OUTPUT", 1),
                payload=NumpyCodec.decode_input(request_input),
            )
            for request_input in payload.inputs
        ]
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs)
