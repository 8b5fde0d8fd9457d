"""Triton's per-model numbers, the breakdown and bottleneck findings, and scrape health.

:class:`TritonModelCollector` renders the latest
:class:`~tritonwatch.records.target_state.TargetState` of every target at scrape time
(docs/design.md §8 names). Only configured targets and models are in the states, and a model
without data in its last window (no traffic, a failed scrape) has no series, so series
of targets and models that went away vanish with them: nothing is ever left stale.

Two families belong to other collectors and are fed from here instead:

* ``tritonwatch_latency_quantile_seconds`` is a summary the canary collector renders;
  :func:`server_quantile_samples` gives the ``source="server"`` samples (from Triton's
  optional summaries) to merge into it, since a registry refuses two collectors that
  emit one family.
* the ``tritonwatch_gpu_*`` families come from
  :class:`~tritonwatch.export.gpu_metrics.GpuMetricsCollector`, fed by
  :meth:`~tritonwatch.scrape.triton_scrapers.TritonScrapers.triton_gpus`.

A pipeline's step breakdown and each model's response cache are rendered here too, from
the families :mod:`~tritonwatch.export.step_metrics` defines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# label_float: quantiles as the canary collector writes them, so both sources share labels.
from tritonwatch.config.detail import Detail
from tritonwatch.export.canary_metrics import QUANTILE_FAMILY, label_float
from tritonwatch.export.detail import family_detail
from tritonwatch.export.step_metrics import CACHE_GAUGES, cache_value, step_families
from tritonwatch.records.target_state import ModelState, TargetState

SERVER_QUANTILE_WINDOW = "1m"
"""Triton's summaries cover a sliding 60 s window."""

_MODEL = ["target", "model"]
_MICROSECONDS = 1e6

QuantileSample = tuple[str, dict[str, str], float]
"""(sample name, labels, value), as ``Metric.add_sample`` takes them."""


@dataclass(frozen=True, slots=True)
class _ModelGauge:
    """A per-model gauge: its family, help text and how to read it off a model's state."""

    name: str
    help: str
    read: Callable[[ModelState], float | None]


def _batch_size_average(state: ModelState) -> float | None:
    """The statistics API's exact average when there is one, else ``/metrics``' (both are
    Δinferences / Δexecutions; the first also survives a server without the counters)."""
    if state.batches is not None and state.batches.batch_size_average is not None:
        return state.batches.batch_size_average
    return state.rates.batch_size_average if state.rates is not None else None


def _max_queue_delay_seconds(state: ModelState) -> float | None:
    if state.config is None or state.config.dynamic_batching is None:
        return None
    return state.config.dynamic_batching.max_queue_delay_microseconds / _MICROSECONDS


_MODEL_GAUGES: tuple[_ModelGauge, ...] = (
    _ModelGauge(
        "tritonwatch_model_requests_per_second",
        "Successful inference requests per second over the last scrape interval.",
        lambda s: s.rates.requests_per_second if s.rates else None,
    ),
    _ModelGauge(
        "tritonwatch_model_throughput_inferences_per_second",
        "Inferences per second (a request of batch N counts N) over the last scrape interval.",
        lambda s: s.rates.inferences_per_second if s.rates else None,
    ),
    _ModelGauge(
        "tritonwatch_model_batch_size_average",
        "Average executed batch size over the last scrape interval.",
        _batch_size_average,
    ),
    _ModelGauge(
        "tritonwatch_model_pending_requests",
        "Requests waiting in Triton's queues at the last scrape (Triton 23.09+).",
        lambda s: s.rates.pending_requests if s.rates else None,
    ),
    _ModelGauge(
        "tritonwatch_model_server_latency_seconds",
        "Average request time inside Triton over the last scrape interval.",
        lambda s: s.rates.request_seconds_average if s.rates else None,
    ),
    _ModelGauge(
        "tritonwatch_model_config_max_batch_size",
        "max_batch_size of the loaded model config (0: the model does not batch).",
        lambda s: s.config.max_batch_size if s.config else None,
    ),
    _ModelGauge(
        "tritonwatch_model_config_dynamic_batching_enabled",
        "1 when the loaded model config enables the dynamic batcher, else 0.",
        lambda s: None if s.config is None else float(s.config.dynamic_batching is not None),
    ),
    _ModelGauge(
        "tritonwatch_model_config_max_queue_delay_seconds",
        "The dynamic batcher's max_queue_delay_microseconds, in seconds.",
        _max_queue_delay_seconds,
    ),
    *(_ModelGauge(name, text, cache_value(read)) for name, text, read in CACHE_GAUGES),
)


@dataclass(frozen=True, slots=True)
class _SplitGauge:
    """A per-model gauge with one more label (stage, kind, reason, batch size)."""

    name: str
    help: str
    label: str
    read: Callable[[ModelState], Iterable[tuple[str, float]]]


def _stage_seconds(state: ModelState) -> Iterable[tuple[str, float]]:
    return state.breakdown.stages().items() if state.breakdown is not None else ()


def _stage_shares(state: ModelState) -> Iterable[tuple[str, float]]:
    return state.bottleneck.shares.items() if state.bottleneck is not None else ()


def _bottleneck_kinds(state: ModelState) -> Iterable[tuple[str, float]]:
    """The current kind only, at 1: an enumeration is one series with the state as a
    label (``== 1`` and ``count by (kind)`` read it as they would a one-hot StateSet,
    at a fifth of the series); no series means unknown."""
    if state.bottleneck is None:
        return ()
    return [(state.bottleneck.kind, 1.0)]


def _failures_by_reason(state: ModelState) -> Iterable[tuple[str, float]]:
    return sorted(state.rates.failures_per_second_by_reason.items()) if state.rates else ()


def _executions_by_batch_size(state: ModelState) -> Iterable[tuple[str, float]]:
    if state.batches is None:
        return ()
    return [
        (str(size), rate)
        for size, rate in sorted(state.batches.executions_per_second_by_size.items())
    ]


def _instances_by_kind(state: ModelState) -> Iterable[tuple[str, float]]:
    by_kind: dict[str, float] = {}
    for group in state.config.instance_groups if state.config is not None else ():
        by_kind[group.kind] = by_kind.get(group.kind, 0) + group.instances
    return sorted(by_kind.items())


_SPLIT_GAUGES: tuple[_SplitGauge, ...] = (
    _SplitGauge(
        "tritonwatch_model_latency_breakdown_seconds",
        "Mean time per request in each stage over the last scrape interval; network_client "
        "is the canary's end-to-end mean minus Triton's request time.",
        "stage",
        _stage_seconds,
    ),
    _SplitGauge(
        "tritonwatch_model_latency_breakdown_ratio",
        "Each stage's share of the time per request (end to end with canary data).",
        "stage",
        _stage_shares,
    ),
    _SplitGauge(
        "tritonwatch_model_bottleneck",
        "1, with the stage group that limits the model's latency as kind (one series: "
        "the current kind; none while unknown).",
        "kind",
        _bottleneck_kinds,
    ),
    _SplitGauge(
        "tritonwatch_model_failures_per_second",
        "Failed inference requests per second over the last scrape interval, by Triton's "
        "reason (REJECTED, CANCELED, BACKEND, OTHER; unknown before Triton 24.07).",
        "reason",
        _failures_by_reason,
    ),
    _SplitGauge(
        "tritonwatch_model_batch_executions_per_second",
        "Model executions per second at each batch size (statistics API), over the last "
        "scrape interval.",
        "batch_size",
        _executions_by_batch_size,
    ),
    _SplitGauge(
        "tritonwatch_model_config_instances",
        "Model instances the loaded config asks for, by instance kind (count per listed GPU).",
        "kind",
        _instances_by_kind,
    ),
)


_SERVER_GAUGES: tuple[tuple[str, str, str], ...] = (
    (
        "tritonwatch_server_cpu_utilization_ratio",
        "CPU utilisation of the Triton server's host, as Triton reports it.",
        "nv_cpu_utilization",
    ),
    (
        "tritonwatch_server_cpu_memory_used_bytes",
        "Memory in use on the Triton server's host, as Triton reports it.",
        "nv_cpu_memory_used_bytes",
    ),
    (
        "tritonwatch_server_cpu_memory_total_bytes",
        "Memory of the Triton server's host, as Triton reports it.",
        "nv_cpu_memory_total_bytes",
    ),
    (
        "tritonwatch_server_pinned_memory_used_bytes",
        "Pinned memory pool in use in the Triton server (Triton 24.01+).",
        "nv_pinned_memory_pool_used_bytes",
    ),
    (
        "tritonwatch_server_pinned_memory_total_bytes",
        "Pinned memory pool size of the Triton server (Triton 24.01+).",
        "nv_pinned_memory_pool_total_bytes",
    ),
)


def _models(states: Iterable[TargetState]) -> Iterator[tuple[str, ModelState]]:
    for state in states:
        for name in sorted(state.models):
            yield state.target, state.models[name]


class TritonModelCollector(Collector):
    """Renders every target's latest state; register it once on the daemon's registry.

    Args:
        states: returns the latest state of every target
            (:meth:`~tritonwatch.scrape.triton_scrapers.TritonScrapers.states`).
        full: whether ``/metrics`` is at ``exporter.detail: full``; below it the
            families of that level only are not built.
    """

    def __init__(
        self, states: Callable[[], Iterable[TargetState]], full: Callable[[], bool] = lambda: True
    ) -> None:
        self._states = states
        self._full = full

    def collect(self) -> Iterator[Metric]:
        states = list(self._states())
        models = list(_models(states))
        full = self._full()
        for gauge in _MODEL_GAUGES:
            if not full and family_detail(gauge.name) == Detail.FULL:
                continue
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=_MODEL)
            for target, model in models:
                value = gauge.read(model)
                if value is not None:
                    family.add_metric([target, model.model], value)
            yield family
        for split in _SPLIT_GAUGES:
            if not full and family_detail(split.name) == Detail.FULL:
                continue
            family = GaugeMetricFamily(split.name, split.help, labels=[*_MODEL, split.label])
            for target, model in models:
                for label, value in split.read(model):
                    family.add_metric([target, model.model, label], value)
            yield family
        yield from step_families(models)
        yield from _server_gauges(states)
        yield from _scrape_health(states)


def _server_gauges(states: list[TargetState]) -> Iterator[Metric]:
    for name, help_text, family_name in _SERVER_GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=["target"])
        for state in states:
            value = state.server.get(family_name)
            if value is not None:
                family.add_metric([state.target], value)
        yield family


def _scrape_health(states: list[TargetState]) -> Iterator[Metric]:
    """Self-monitoring: did the last scrape of each source work, and how long did it take."""
    success = GaugeMetricFamily(
        "tritonwatch_scrape_success",
        "1 when the last scrape of the source (metrics, stats, config) succeeded, else 0; "
        "absent for an API the server lacks.",
        labels=["target", "source"],
    )
    duration = GaugeMetricFamily(
        "tritonwatch_scrape_duration_seconds",
        "How long the last scrape of the source took (all models, for stats and config).",
        labels=["target", "source"],
    )
    bad_lines = CounterMetricFamily(
        "tritonwatch_scrape_bad_lines",
        "Lines of the target's /metrics page that could not be read and were skipped.",
        labels=["target"],
    )
    failures = CounterMetricFamily(
        "tritonwatch_scrape_failures",
        "Scrapes of the source that failed, by outcome "
        "(timeout, connection_error, http_error, grpc_error, too_large, bad_response).",
        labels=["target", "source", "outcome"],
    )
    for state in states:
        for source, outcome in sorted(state.sources.items()):
            success.add_metric([state.target, str(source)], 1.0 if outcome.ok else 0.0)
            duration.add_metric([state.target, str(source)], outcome.duration_seconds)
        bad_lines.add_metric([state.target], state.bad_lines_total)
        for (source, status), count in sorted(state.failures.items()):
            failures.add_metric([state.target, str(source), str(status)], count)
    yield success
    yield duration
    yield bad_lines
    yield failures


def server_quantile_samples(states: Iterable[TargetState]) -> Iterator[QuantileSample]:
    """Triton's request-duration summaries as ``source="server"`` samples of
    ``tritonwatch_latency_quantile_seconds`` (window ``1m``), in seconds.

    A quantile Triton prints as NaN (an idle model) stays NaN: no data, not zero latency.
    ``_count`` and ``_sum`` are Triton's cumulative ones.
    """
    for target, model in _models(states):
        summary = model.server_summary
        if summary is None:
            continue
        labels = {
            "target": target,
            "model": model.model,
            "window": SERVER_QUANTILE_WINDOW,
            "source": "server",
        }
        for quantile, microseconds in summary.quantiles.items():
            seconds = microseconds / _MICROSECONDS  # NaN stays NaN
            yield QUANTILE_FAMILY, {**labels, "quantile": label_float(quantile)}, seconds
        if summary.count is not None and summary.sum is not None:
            yield f"{QUANTILE_FAMILY}_count", labels, summary.count
            yield f"{QUANTILE_FAMILY}_sum", labels, summary.sum / _MICROSECONDS
