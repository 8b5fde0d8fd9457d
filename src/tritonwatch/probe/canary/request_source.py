"""Requests made per send, for the models one fixed request cannot measure.

A plain model's canary builds its request once and sends those bytes forever (the
cheapest send there is: probe/canary/engine.py). Three kinds of model need each request
made when it is sent (:func:`varying_requests` decides, from the model's config and
the canary's settings):

* a **stateful** model (``sequence_batching``): each request carries its sequence's
  correlation id and START/END flags (probe/canary/sequence.py); not an
  ``iterative_sequence`` one, which takes plain requests;
* a model behind Triton's **response cache** with ``canary.cache: miss`` (the
  default): each request's input bytes are unique (probe/canary/unique_inputs.py), so
  the canary measures the model, not the cache; ``cache: hit`` repeats them on purpose;
* ``canary.input_data`` with more than one sample: the samples in turn, one per
  request (kserve/input_data.py); samples are sent as given, so a cached model's
  canary then hits the cache once each sample was seen (``canary_cache_repeats``).

:class:`RequestSource` makes each request's tensors and parameters;
:class:`CanaryRequests` encodes them for the protocol and the path that sends: the
engine (:class:`~tritonwatch.probe.canary.engine_wires.VaryingRequests`, on its thread),
the event loop, or the library path, and relays the schedule's questions to the
sequence planner.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.kserve.input_data import load_samples
from tritonwatch.kserve.payload import Tensor, TensorSpec
from tritonwatch.probe.canary.engine_wires import VaryingRequests
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.library_path import LibraryCall
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.probe.canary.sequence import SequencePlanner, string_correlation_id
from tritonwatch.probe.canary.unique_inputs import UniqueInputs
from tritonwatch.records.model_traits import model_traits
from tritonwatch.wire.http2 import UnaryRequest
from tritonwatch.wire.kserve_protobuf import Scalar
from tritonwatch.wire.limits import HttpRequest

_log = get_logger("canary")
CACHE_REPEATS_WARNING = 86_400
"""Fewer distinct requests than this (a day at 1/s) and a cached model's canary says
that its requests will repeat, and be answered from the cache."""


@dataclass(frozen=True, slots=True)
class RequestParts:
    """One request: its input tensors and its request parameters."""

    tensors: tuple[Tensor, ...]
    parameters: Mapping[str, Scalar] = field(default_factory=dict)


class RequestSource:
    """Each request's tensors (samples in turn, or unique bytes) and parameters (a
    sequence's flags); safe to call from the engine's thread and the event loop's."""

    def __init__(
        self,
        samples: Sequence[tuple[Tensor, ...]],
        *,
        unique: UniqueInputs | None = None,
        sequence: SequencePlanner | None = None,
    ) -> None:
        self.samples = tuple(samples)
        self.unique = unique
        self.sequence = sequence
        self._turn = 0
        self._lock = threading.Lock()

    def next(self, intended: float | None = None, *, lone: bool = False) -> RequestParts:
        """The request for the send at ``intended`` (None: the oldest planned one);
        ``lone``: a sequence of its own, whatever is planned (the library path's)."""
        with self._lock:
            if self.unique is not None:
                tensors = self.unique.next()
            else:
                tensors = self.samples[self._turn % len(self.samples)]
                self._turn += 1
        if self.sequence is None:
            return RequestParts(tensors)
        flags = self.sequence.lone() if lone else self.sequence.take(intended)
        return RequestParts(tensors, flags.parameters())

    def largest(self) -> RequestParts:
        """A request as large as any it makes (to size the engine's gRPC window)."""
        tensors = max(self.samples, key=lambda sample: sum(len(t.raw) for t in sample))
        if self.sequence is None:
            return RequestParts(tensors)
        flags = {"sequence_id": self.sequence.longest_id, "sequence_start": True}
        return RequestParts(tensors, {**flags, "sequence_end": True})


class CanaryRequests:
    """One canary's requests made per send, encoded for its protocol and path."""

    def __init__(self, source: RequestSource, plan: CanaryPlan) -> None:
        self.source = source
        self._plan = plan

    @property
    def sequence(self) -> SequencePlanner | None:
        return self.source.sequence

    def planned(self, intended: float) -> None:
        """The send at ``intended`` is allowed (a sequence fixes its flags now)."""
        if self.source.sequence is not None:
            self.source.sequence.plan(intended)

    def finished(self, intended: float, *, ok: bool) -> None:
        """The send at ``intended`` ended (``ok``: a success; a failure ends its sequence)."""
        if self.source.sequence is not None:
            self.source.sequence.finished(intended, ok=ok)

    def _encoded(
        self, client: InferenceClient, *, binary: bool, intended: float | None, lone: bool
    ) -> bytes:
        """The next request encoded by ``client`` (for the send at ``intended``, when
        given; ``lone``: a sequence of its own)."""
        plan, parts = self._plan, self.source.next(intended, lone=lone)
        return client.encode_infer(
            plan.model, plan.version, parts.tensors, binary=binary, parameters=parts.parameters
        )

    def engine_requests(self, client: InferenceClient, *, binary: bool) -> VaryingRequests | None:
        """The engine's requests of this canary; None when the largest of them is more
        than the engine can send (the library path sends them)."""
        plan = self._plan
        largest = self.source.largest()
        probe = client.encode_infer(
            plan.model, plan.version, largest.tensors, binary=binary, parameters=largest.parameters
        )
        first = client.wire_request(probe, timeout=plan.timeout, limits=plan.limits)
        if first is None:
            return None

        def make() -> HttpRequest | UnaryRequest:
            encoded = self._encoded(client, binary=binary, intended=None, lone=False)
            request = client.wire_request(encoded, timeout=plan.timeout, limits=plan.limits)
            assert request is not None  # no larger than the largest, which fits
            return request

        return VaryingRequests(make, grpc=isinstance(first, UnaryRequest))

    def library_call(self, client: InferenceClient, *, binary: bool) -> LibraryCall:
        """The library path's call: each call sends a request made for it, a stateful
        model's a sequence of its own (START and END: the library path knows no send
        time, and must not take the flags planned for the engine's next send)."""
        limits = self._plan.limits

        def call(timeout: float) -> Any:
            encoded = self._encoded(client, binary=binary, intended=None, lone=True)
            return client.library_call(encoded, limits)(timeout)

        return call


def varying_requests(
    plan: CanaryPlan,
    config: Mapping[str, Any] | None,
    specs: Sequence[TensorSpec],
    tensors: Sequence[Tensor],
    *,
    poisson: random.Random | None = None,
) -> tuple[tuple[Tensor, ...], CanaryRequests | None]:
    """The canary's first request's tensors and, when the model needs each request made
    as it is sent, its :class:`CanaryRequests` (None: ``tensors`` every time).
    ``poisson``: the generator of a Poisson schedule's gaps (a sequence draws its own).

    Raises:
        PayloadError: ``canary.input_data`` cannot be read or does not fit the model.
    """
    traits = model_traits(config)
    samples = [tuple(tensors)]
    if plan.input_data is not None:
        batching = config is not None and int(config.get("max_batch_size", 0)) > 0
        samples = load_samples(
            plan.model, plan.input_data, specs, tensors, plan.inputs, batching=batching
        )
    unique = None
    if traits.response_cache and plan.cache == "miss":
        if plan.input_data is None:
            unique = UniqueInputs(samples[0])
        if unique is None or (unique.capacity or CACHE_REPEATS_WARNING) < CACHE_REPEATS_WARNING:
            why = "the first input has too few elements to be unique"
            if unique is None:
                why = "input_data samples are sent as given"
            _log.warning(
                "canary_cache_repeats",
                target=plan.target,
                model=plan.model,
                distinct_requests=len(samples) if unique is None else unique.capacity,
                why=why,
            )
    sequence = None
    if traits.sequence is not None and not traits.sequence.iterative:
        sequence = SequencePlanner(
            rate=plan.rate,
            length=plan.sequence.length,
            max_idle_seconds=traits.sequence.max_idle_seconds,
            id_start=plan.sequence.id_start,
            id_count=plan.sequence.id_count,
            string_ids=string_correlation_id(config),
            poisson=poisson,
        )
    if unique is None and sequence is None and len(samples) == 1:
        return samples[0], None
    source = RequestSource(samples, unique=unique, sequence=sequence)
    return samples[0], CanaryRequests(source, plan)
