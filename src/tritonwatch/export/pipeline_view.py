"""One line each for the status page: a pipeline's steps, a model's response cache.

Pure text from a judged :class:`~tritonwatch.records.target_state.ModelState`; the
status page escapes and places it (:mod:`~tritonwatch.export.status_page`).
"""

from __future__ import annotations

from tritonwatch.records.target_state import ModelState, StepTime

QUEUE_SHOWN_SECONDS = 0.0005
"""A step's queue is named beside its time from half a millisecond on."""


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _step(step: StepTime) -> str:
    calls = "" if step.calls == 1 else f" ×{step.calls:.2g}{'~' if step.calls_estimated else ''}"
    queue = f" (queue {step.queue * 1e3:.1f})" if step.queue >= QUEUE_SHOWN_SECONDS else ""
    return f"{step.step}{calls} {_ms(step.total)}{queue}"


def steps_line(state: ModelState | None) -> str | None:
    """``prep 3.4 ms · core 25.4 ms (queue 20.1) · post 1.5 ms · own 0.6 ms``: each
    step's time per pipeline request (×calls per request where not 1, ``~`` when
    estimated), its queue where it counts, then the pipeline's own remainder, and the
    bottleneck's reason when it names a step; None for a model that is no pipeline or
    had no request in the window."""
    steps = state.steps if state is not None else None
    if steps is None:
        return None
    parts = [_step(step) for step in steps.steps]
    if steps.queue >= QUEUE_SHOWN_SECONDS:
        parts.append(f"own queue {_ms(steps.queue)}")
    parts.append(f"own {_ms(steps.own)}")
    parts += [f"{name} (no readings)" for name in steps.missing]
    line = " · ".join(parts)
    if steps.parallel:
        line += " (parallel branches: the steps overlap)"
    neck = state.bottleneck if state is not None else None
    if neck is not None and neck.step:
        line += f"; {neck.reason}"
    return line


def cache_line(state: ModelState | None) -> str | None:
    """``response cache: 87% hits · hit 0.02 ms · miss 0.05 ms`` over the last scrape
    window, from ``/metrics`` or the statistics API (:attr:`ModelState.cache`); None for
    a model without cache readings."""
    cache = state.cache if state is not None else None
    if cache is None:
        return None
    ratio = "no lookups" if cache.hit_ratio is None else f"{cache.hit_ratio:.0%} hits"
    parts = [f"response cache: {ratio}"]
    if cache.hit_seconds_average is not None:
        parts.append(f"hit {cache.hit_seconds_average * 1e3:.2f} ms")
    if cache.miss_seconds_average is not None:
        parts.append(f"miss {cache.miss_seconds_average * 1e3:.2f} ms")
    return " · ".join(parts)
