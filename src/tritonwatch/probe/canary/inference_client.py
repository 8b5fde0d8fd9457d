"""What a canary asks of its client: one face over KServe v2 HTTP and gRPC.

The canary (probe/canary/model_canary.py, unary.py) is written against
:class:`InferenceClient`, not against the two classes that implement it
(probe/canary/clients.py), so the protocol is a constructor argument and no code path
asks which client it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tritonwatch.kserve.payload import Tensor
from tritonwatch.probe.canary.engine_channels import Endpoint
from tritonwatch.probe.canary.library_path import LibraryCall
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.kserve_protobuf import Scalar
from tritonwatch.wire.limits import AnswerLimits, HttpRequest


class InferenceClient(Protocol):
    """A canary's face over one KServe v2 protocol (HTTP or gRPC), so the canary takes
    the protocol as a constructor argument
    (:func:`~tritonwatch.probe.canary.clients.client_for`): the model's metadata and
    config, its requests encoded, as the engine sends them and as the library path does."""

    protocol: str

    @property
    def engine_endpoint(self) -> Endpoint:
        """(host, port, TLS or None) the engine connects to."""
        ...

    async def extensions(self) -> frozenset[str]: ...

    async def metadata(self, model: str, version: str) -> dict[str, Any]: ...

    async def config(self, model: str, version: str) -> dict[str, Any] | None: ...

    def infer_request(
        self, model: str, version: str, tensors: Sequence[Tensor], *, binary: bool
    ) -> bytes:
        """The encoded request (HTTP/1.1 bytes, a gRPC message), made once while the
        tensors stay the same objects."""
        ...

    def encode_infer(
        self,
        model: str,
        version: str,
        tensors: Sequence[Tensor],
        *,
        binary: bool,
        parameters: Mapping[str, Scalar] | None = None,
    ) -> bytes:
        """The encoded request with the request ``parameters`` given, made afresh."""
        ...

    def wire_request(
        self, encoded: bytes, *, timeout: float, limits: AnswerLimits
    ) -> HttpRequest | UnaryRequest | None:
        """``encoded`` as the engine sends it; None when the engine cannot."""
        ...

    def library_call(self, encoded: bytes, limits: AnswerLimits) -> LibraryCall:
        """``encoded`` as the library path sends it (probe/canary/library_path.py)."""
        ...

    async def close(self) -> None: ...
