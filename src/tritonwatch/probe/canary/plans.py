"""What each model's canary is asked to do, resolved from the config: its plan.

One :class:`CanaryPlan` per enabled canary (:func:`canary_plans`), with the target's
URLs, TLS and answer limits and the canary's rate, schedule, timeout and inputs, scaled
down to hard per-target caps so no config can point more than a canary's load at a
production server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.common.logs import get_logger
from tritonwatch.config.canary_schema import (
    DEFAULT_STRING_LENGTH,
    InputOverride,
    SequenceCanary,
    StreamConfig,
)
from tritonwatch.config.schema import Config
from tritonwatch.kserve.payload import Tensor, TensorSpec, build_inputs
from tritonwatch.wire.limits import DEFAULT_LIMITS, AnswerLimits

_log = get_logger("canary")
DYNAMIC_DIM = 1
"""What a dynamic dim (-1) of an input is when ``canary.inputs.NAME.shape`` does not say:
the smallest request, so any model gets a canary without hand-written inputs."""


@dataclass(frozen=True, slots=True)
class CanaryPlan:
    """Everything one model's canary needs, resolved from the config."""

    target: str
    model: str
    version: str
    protocol: str
    http_url: str
    grpc_url: str
    rate: float
    """Requests per second it sends: the config's, scaled down by the caps and budget."""
    poisson: bool
    timeout: float
    max_in_flight: int
    data: str
    inputs: dict[str, InputOverride] = field(default_factory=dict)
    string_length: int = DEFAULT_STRING_LENGTH
    string_data: str | None = None
    """BYTES inputs without a sample file: random strings of ``string_length``, or this."""
    tls: ClientTLS | None = None
    """The target's TLS settings, used when the URL the protocol picks is secure."""
    stream: StreamConfig = field(default_factory=StreamConfig)
    """How a generative model is streamed from (probe/stream/stream_canary.py)."""
    openai_url: str | None = None
    """The OpenAI-compatible server of protocol ``openai``."""
    served_name: str | None = None
    """The name an OpenAI-compatible server knows the model by (its ``model`` field)."""
    grpc_only: bool = False
    """The target has no known HTTP API (``TargetConfig.grpc_only``): a gRPC canary
    asks metadata and config over gRPC, not ``http_url`` (which costs ``grpc`` and
    ``tritonclient.grpc``, 23 MiB, in the daemon)."""
    limits: AnswerLimits = DEFAULT_LIMITS
    """How much of an answer is read before it is ``too_large`` (``canary.limits``)."""
    input_data: Path | None = None
    """A perf_analyzer input-data file whose samples it sends in turn (kserve/input_data.py)."""
    cache: Literal["miss", "hit"] = "miss"
    """For a model behind the response cache: unique bytes per request, or repeated."""
    sequence: SequenceCanary = field(default_factory=SequenceCanary)
    """A stateful model's sequences (probe/canary/sequence.py)."""
    asked_rate: float = 0.0
    """The rate before ``canary.max_total_rate`` scaled it (the per-target caps applied)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.target, self.model, self.protocol)


MAX_RATE_PER_TARGET = 50.0
"""Canary requests per second one target receives at most, whatever the config says."""
MAX_IN_FLIGHT_PER_TARGET = 64
"""Canary requests outstanding on one target at most, whatever the config says."""


def _capped(plans: list[CanaryPlan]) -> list[CanaryPlan]:
    """Scales each target's canaries down to the hard caps (a safety net for configs
    that ask more of a production server than a canary should)."""
    capped = []
    for target in dict.fromkeys(plan.target for plan in plans):
        own = [plan for plan in plans if plan.target == target]
        rate = sum(plan.rate for plan in own)
        in_flight = sum(plan.max_in_flight for plan in own)
        rate_scale = min(1.0, MAX_RATE_PER_TARGET / rate)
        flight_scale = min(1.0, MAX_IN_FLIGHT_PER_TARGET / in_flight)
        if rate_scale < 1.0 or flight_scale < 1.0:
            _log.warning(
                "canary_capped",
                target=target,
                asked_rate=rate,
                asked_in_flight=in_flight,
                rate_cap=MAX_RATE_PER_TARGET,
                in_flight_cap=MAX_IN_FLIGHT_PER_TARGET,
            )
        capped += [
            replace(
                plan,
                rate=plan.rate * rate_scale,
                max_in_flight=max(1, int(plan.max_in_flight * flight_scale)),
            )
            for plan in own
        ]
    return capped


def canary_plans(config: Config) -> list[CanaryPlan]:
    """One plan per enabled model canary in ``config``, within the per-target caps."""
    plans = []
    for target in config.targets:
        for model in target.models:
            canary = config.canary_for(target, model)
            if not canary.enabled:
                continue
            plans.append(
                CanaryPlan(
                    target=target.name,
                    model=model.name,
                    version=model.version,
                    protocol=canary.protocol or target.protocol,
                    http_url=target.effective_http_url,
                    grpc_url=target.effective_grpc_url,
                    rate=canary.rate,
                    poisson=canary.distribution == "poisson",
                    timeout=canary.timeout,
                    max_in_flight=canary.max_in_flight,
                    data=canary.data,
                    inputs=dict(canary.inputs),
                    string_length=canary.string_length,
                    string_data=canary.string_data,
                    tls=target.client_tls,
                    stream=canary.stream,
                    openai_url=target.openai_url,
                    served_name=model.served_name,
                    grpc_only=target.grpc_only,
                    limits=AnswerLimits(**canary.limits.model_dump()),
                    input_data=canary.input_data,
                    cache=canary.cache,
                    sequence=canary.sequence,
                )
            )
    return within_budget(_capped(plans), config.canary.max_total_rate)


def within_budget(plans: list[CanaryPlan], max_total_rate: float) -> list[CanaryPlan]:
    """Every plan with ``asked_rate`` its rate, and the rate scaled by one factor when the
    rates add up to more than ``max_total_rate`` (``canary.max_total_rate``); logs the
    scaling (an apply, a reload or a discovery change, makes new plans)."""
    asked = sum(plan.rate for plan in plans)
    scale = min(1.0, max_total_rate / asked) if asked > 0 else 1.0
    if scale < 1.0:
        _log.warning(
            "canary_budget_applied",
            asked_rate=round(asked, 3),
            max_total_rate=max_total_rate,
            scale=round(scale, 4),
            models=len(plans),
        )
    return [replace(plan, asked_rate=plan.rate, rate=plan.rate * scale) for plan in plans]


class TensorSource(Protocol):
    """What a model's tensors are built from: a canary's plan, or a sweep's settings."""

    @property
    def model(self) -> str: ...
    @property
    def inputs(self) -> dict[str, InputOverride]: ...
    @property
    def data(self) -> str: ...
    @property
    def string_length(self) -> int: ...
    @property
    def string_data(self) -> str | None: ...


def source_tensors(source: TensorSource, specs: Sequence[TensorSpec]) -> list[Tensor]:
    """The tensors of ``specs`` as ``source`` asks for them (its overrides, zero or random
    data, its strings), a dynamic dimension sent as :data:`DYNAMIC_DIM`.

    Raises:
        PayloadError: an input that cannot be built.
    """
    return build_inputs(
        source.model,
        list(specs),
        source.inputs,
        "zero" if source.data == "zero" else "random",
        string_length=source.string_length,
        string_data=source.string_data,
        dynamic_dim=DYNAMIC_DIM,
    )
