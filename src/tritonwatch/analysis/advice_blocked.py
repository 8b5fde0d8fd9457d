"""Why the advisor proposes nothing for a model that needs something: silence means healthy.

A model whose SLO burns while its breakdown names a bottleneck gets either a
recommendation or, from :func:`blocked_reason`, the reason no change is safe —
exported as ``tritonwatch_advice_blocked{target,model,reason}`` and shown on the status
page — so that "the advisor sees nothing safe to change" is never mistaken for "the
advisor is not looking".
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from tritonwatch.analysis.advisor_records import AdvisorInput, AdvisorThresholds, Recommendation
from tritonwatch.analysis.advisor_rules import cannot_batch_more, host_cpu_saturated
from tritonwatch.records.target_state import BottleneckKind


class BlockedReason(StrEnum):
    """Why no change is proposed; exported as the ``reason`` label."""

    HOST_CPU_SATURATED = "host_cpu_saturated"
    """The host's CPU is saturated: more instances or less batching delay would only
    share it; the fix is more CPU (another host, a replica) or a cheaper model."""
    GPU_SATURATED = "gpu_saturated"
    """The GPU is busy: more instances would share it; the fix is another GPU or a
    cheaper model (quantisation, TensorRT)."""
    NO_CONFIG_API = "no_config_api"
    """The server does not answer its model configuration: there is no setting to read,
    so none to propose."""
    NEEDS_MODEL_CHANGE = "needs_model_change"
    """The time is the model's own (compute, or its inputs and outputs): no serving
    setting shortens it."""
    ALREADY_AT_LIMIT = "already_at_limit"
    """The setting that would help is as far as it safely goes (no GPU memory for an
    instance, batches already full, no batching delay left to lower)."""
    NEEDS_CLIENT_CHANGE = "needs_client_change"
    """The time is between client and server (network, serialisation): no server setting
    shortens it; gRPC, shared memory or a client nearer the server would."""
    NO_READINGS = "no_readings"
    """What the change would be judged on is not measured (no GPU or CPU utilisation)."""
    PROFILE_PYTHON = "declare_composing_models_or_profile_python"
    """A Python-backend model's own compute dominates: no quantisation or TensorRT
    applies to Python. If it calls other models (BLS), declare them as its
    ``composing_models`` so their queue and compute are split out and advised on; else
    profile the Python (or move the work into a model a backend can optimise)."""


def blocked_reason(
    m: AdvisorInput,
    t: AdvisorThresholds,
    *,
    bottleneck: BottleneckKind | None,
    burning: bool,
    recommendations: Sequence[Recommendation],
) -> BlockedReason | None:
    """The reason ``m`` gets no recommendation although it needs one; None when it has
    one, does not burn its SLO, or no stage is a bottleneck (nothing to answer)."""
    if recommendations or not burning or bottleneck in (None, "balanced"):
        return None
    gpu = m.gpu_utilization
    checks = (
        (host_cpu_saturated(m, t), BlockedReason.HOST_CPU_SATURATED),
        (gpu is not None and gpu >= t.gpu_busy_threshold, BlockedReason.GPU_SATURATED),
        (m.instance_count is None, BlockedReason.NO_CONFIG_API),
        (m.python_backend and bottleneck == "compute-bound", BlockedReason.PROFILE_PYTHON),
        (bottleneck in ("compute-bound", "io-bound"), BlockedReason.NEEDS_MODEL_CHANGE),
        (bottleneck == "network-bound", BlockedReason.NEEDS_CLIENT_CHANGE),
        (_unmeasured(m), BlockedReason.NO_READINGS),
    )
    return next((reason for applies, reason in checks if applies), BlockedReason.ALREADY_AT_LIMIT)


def _unmeasured(m: AdvisorInput) -> bool:
    """An instance change would be judged on utilisation nobody reports."""
    if m.instance_kind == "KIND_CPU":
        return m.host_cpu_utilization is None
    return m.gpu_utilization is None and cannot_batch_more(m)
