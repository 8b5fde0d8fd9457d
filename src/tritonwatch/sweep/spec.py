"""What a load worker needs to know, in a form that crosses process boundaries."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from tritonwatch.common.client_tls import ClientTLS, tls_for
from tritonwatch.kserve.encoded import encode_http_infer, grpc_infer_request
from tritonwatch.kserve.payload import Tensor
from tritonwatch.records.sweep_records import Arrivals, LoadMode


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """A pre-encoded request and the load shape to send it with (picklable).

    ``concurrency`` is the number of requests kept in flight (closed loop); in
    ``rate`` mode ``rate`` requests per second leave on schedule (open loop) with at
    most ``concurrency`` in flight, latency counted from the intended send time.
    """

    protocol: Literal["http", "grpc"]
    host: str
    port: int
    payload: bytes
    """HTTP: the whole HTTP/1.1 request. gRPC: a serialized ``ModelInferRequest``."""
    mode: LoadMode
    concurrency: int
    rate: float = 0.0
    timeout: float = 30.0
    tls: ClientTLS | None = None
    """Set for ``https://``/``grpcs://`` URLs (the system's CAs when none configured)."""
    arrivals: Arrivals = "constant"
    """In ``rate`` mode: evenly spaced sends, or Poisson arrivals (exponential gaps of
    mean ``1 / rate``, perf_analyzer's ``--request-distribution poisson``)."""


def arrival_gaps(rate: float, arrivals: Arrivals, draw: random.Random) -> Iterator[float]:
    """The seconds between one send and the next at ``rate`` per second: ``1 / rate``
    each, or exponential draws of that mean from ``draw`` (Poisson arrivals).

    Raises:
        ValueError: ``rate`` is not positive.
    """
    if not rate > 0:
        raise ValueError(f"rate must be positive, got: {rate}")
    while True:
        yield draw.expovariate(rate) if arrivals == "poisson" else 1.0 / rate


def http_load_spec(
    url: str,
    model: str,
    version: str,
    tensors: Sequence[Tensor],
    *,
    mode: LoadMode,
    concurrency: int,
    rate: float = 0.0,
    timeout: float = 30.0,
    tls: ClientTLS | None = None,
) -> LoadSpec:
    encoded = encode_http_infer(url, model, version, tensors)
    return LoadSpec(
        "http",
        encoded.host,
        encoded.port,
        encoded.payload,
        mode,
        concurrency,
        rate,
        timeout,
        tls_for(url, tls),
    )


def grpc_load_spec(
    url: str,
    model: str,
    version: str,
    tensors: Sequence[Tensor],
    *,
    mode: LoadMode,
    concurrency: int,
    rate: float = 0.0,
    timeout: float = 30.0,
    tls: ClientTLS | None = None,
) -> LoadSpec:
    request = grpc_infer_request(model, version, tensors)
    address = url.partition("://")[2]
    host, _, port = address.rstrip("/").rpartition(":")
    return LoadSpec(
        "grpc",
        host.strip("[]"),
        int(port),
        request,
        mode,
        concurrency,
        rate,
        timeout,
        tls_for(url, tls),
    )
