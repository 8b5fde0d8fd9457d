"""One outcome for a source that a cycle asked more than once (per model, per level)."""

from __future__ import annotations

from collections.abc import Sequence

from tritonwatch.records.target_state import FetchStatus, ScrapeSource, SourceOutcome
from tritonwatch.triton_api.answer import ApiAnswer


def merged_outcome(
    first: SourceOutcome | None, second: SourceOutcome | None
) -> SourceOutcome | None:
    """Two outcomes of one source in one cycle as one: the first failure, the total time."""
    if first is None or second is None:
        return first or second
    failed = first if not first.ok else second
    duration = first.duration_seconds + second.duration_seconds
    return SourceOutcome(first.source, failed.status, duration, failed.error)


def combined_outcome(
    source: ScrapeSource, answers: Sequence[tuple[str, ApiAnswer]], spent: float = 0.0
) -> SourceOutcome:
    """One outcome for a source's per-model requests: the first failure, the total time
    (with ``spent``, the time of this cycle's other requests to the source)."""
    duration = spent + sum(answer.duration_seconds for _, answer in answers)
    for model, answer in answers:
        if not answer.ok:
            return SourceOutcome(source, answer.status, duration, f"{model}: {answer.error}")
    return SourceOutcome(source, FetchStatus.SUCCESS, duration)
