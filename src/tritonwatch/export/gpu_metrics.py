"""The ``tritonwatch_gpu_*`` families (docs/design.md §8), rendered at scrape time.

One collector owns every GPU family because two sources feed some of them: NVML on
this host (:class:`~tritonwatch.scrape.nvml_sampler.NvmlSampler`) and the DCGM
gauges each Triton server prints (:class:`~tritonwatch.records.observations.TritonGpuRates`).
A registry refuses two collectors that yield the same family, and a series must not
appear twice, so the rule is: utilisation comes from both, told apart by ``source``
(nvml|triton); every other family comes from NVML where NVML sees the GPU, and from
Triton only for GPUs NVML does not see (the usual case: Triton runs on other hosts).

Labels: ``gpu`` is the GPU (or MIG device) UUID and ``gpu_index`` NVML's index, with
the MIG slot after a colon for MIG devices (``0:3``). Triton only names GPUs by UUID,
so its GPUs on other hosts have an empty ``gpu_index``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tritonwatch.records.observations import (
    CLOCK_EVENT_REASONS,
    GpuSample,
    NvmlState,
    TritonGpuRates,
)

_GPU_LABELS = ["gpu", "gpu_index"]

# (family, help, GpuSample field, TritonGpuRates field or None); `_total` makes a counter.
_PER_GPU: tuple[tuple[str, str, str, str | None], ...] = (
    (
        "tritonwatch_gpu_memory_used_bytes",
        "GPU memory in use, the driver's reservation included (total - free).",
        "memory_used_bytes",
        "memory_used_bytes",
    ),
    (
        "tritonwatch_gpu_memory_total_bytes",
        "GPU memory in total.",
        "memory_total_bytes",
        "memory_total_bytes",
    ),
    (
        "tritonwatch_gpu_memory_reserved_bytes",
        "GPU memory the driver reserves for itself (NVML memory info v2).",
        "memory_reserved_bytes",
        None,
    ),
    (
        "tritonwatch_gpu_memory_busy_ratio",
        "Fraction of the last sample period the GPU memory was being read or written.",
        "memory_utilization_ratio",
        None,
    ),
    ("tritonwatch_gpu_power_watts", "GPU power draw.", "power_watts", "power_watts"),
    (
        "tritonwatch_gpu_power_limit_watts",
        "GPU power limit in force.",
        "power_limit_watts",
        "power_limit_watts",
    ),
    # NVML counts energy since the driver loaded, Triton since the server started: both
    # are counters that reset, which rate() handles.
    (
        "tritonwatch_gpu_energy_joules_total",
        "GPU energy consumed.",
        "energy_joules",
        "energy_joules",
    ),
    ("tritonwatch_gpu_sm_clock_hertz", "GPU SM clock.", "sm_clock_hertz", None),
    ("tritonwatch_gpu_memory_clock_hertz", "GPU memory clock.", "memory_clock_hertz", None),
    ("tritonwatch_gpu_temperature_celsius", "GPU core temperature.", "temperature_celsius", None),
    ("tritonwatch_gpu_fan_speed_ratio", "GPU fan speed, of its maximum.", "fan_speed_ratio", None),
    (
        "tritonwatch_gpu_sm_active_ratio",
        "Fraction of SMs busy between the last two GPM samples (Hopper and newer).",
        "sm_active_ratio",
        None,
    ),
    (
        "tritonwatch_gpu_sm_occupancy_ratio",
        "Resident warps over the SMs' maximum between the last two GPM samples.",
        "sm_occupancy_ratio",
        None,
    ),
    (
        "tritonwatch_gpu_tensor_active_ratio",
        "Fraction of time tensor cores were busy between the last two GPM samples.",
        "tensor_active_ratio",
        None,
    ),
)


def gpu_index_label(sample: GpuSample) -> str:
    """``"0"`` for a whole GPU, ``"0:3"`` for MIG slot 3 of GPU 0."""
    if sample.mig_index is None:
        return str(sample.index)
    return f"{sample.index}:{sample.mig_index}"


class GpuMetricsCollector(Collector):
    """Renders the latest GPU readings; register it once on the daemon's registry.

    Args:
        nvml: returns the NVML sampler's state (``NvmlSampler.state``), or None
            when NVML is not used.
        triton: returns the latest Triton GPU readings by GPU UUID, one entry per GPU
            (the caller merges GPUs that several targets report), or None.
    """

    def __init__(
        self,
        nvml: Callable[[], NvmlState] | None = None,
        triton: Callable[[], Mapping[str, TritonGpuRates]] | None = None,
    ) -> None:
        self._nvml = nvml
        self._triton = triton

    def collect(self) -> Iterator[Metric]:
        state = self._nvml() if self._nvml is not None else None
        samples: Sequence[GpuSample] = state.samples if state is not None else ()
        triton = dict(self._triton()) if self._triton is not None else {}
        index_of = {sample.uuid: gpu_index_label(sample) for sample in samples}
        only_triton = {uuid: rates for uuid, rates in triton.items() if uuid not in index_of}

        info = InfoMetricFamily(
            "tritonwatch_gpu",
            "GPUs NVML sees on this host; the value is always 1.",
            labels=_GPU_LABELS,
        )
        utilization = GaugeMetricFamily(
            "tritonwatch_gpu_utilization_ratio",
            "Fraction of the last sample period a kernel ran on the GPU, by source (nvml|triton).",
            labels=[*_GPU_LABELS, "source"],
        )
        for sample in samples:
            labels = [sample.uuid, index_of[sample.uuid]]
            info.add_metric(labels, {"name": sample.name, "parent_gpu": sample.parent_uuid or ""})
            if sample.utilization_ratio is not None:
                utilization.add_metric([*labels, "nvml"], sample.utilization_ratio)
        for uuid, rates in triton.items():
            if rates.utilization_ratio is not None:
                labels = [uuid, index_of.get(uuid, ""), "triton"]
                utilization.add_metric(labels, rates.utilization_ratio)
        yield info
        yield utilization
        yield from _per_gpu(samples, index_of, only_triton)
        yield _clock_event_reasons(samples, index_of)
        yield _process_memory(samples, index_of)
        if state is not None:
            yield _query_failures(state, index_of)


def _per_gpu(
    samples: Sequence[GpuSample],
    index_of: Mapping[str, str],
    only_triton: Mapping[str, TritonGpuRates],
) -> Iterator[Metric]:
    """One family per row of :data:`_PER_GPU`, NVML's GPUs first, then Triton-only ones."""
    for name, help_text, field, triton_field in _PER_GPU:
        family: GaugeMetricFamily | CounterMetricFamily
        if name.endswith("_total"):
            family = CounterMetricFamily(name.removesuffix("_total"), help_text, labels=_GPU_LABELS)
        else:
            family = GaugeMetricFamily(name, help_text, labels=_GPU_LABELS)
        for sample in samples:
            value = getattr(sample, field)
            if value is not None:
                family.add_metric([sample.uuid, index_of[sample.uuid]], value)
        if triton_field is not None:
            for uuid, rates in only_triton.items():
                value = getattr(rates, triton_field)
                if value is not None:
                    family.add_metric([uuid, ""], value)
        yield family


def _clock_event_reasons(samples: Sequence[GpuSample], index_of: Mapping[str, str]) -> Metric:
    reasons = GaugeMetricFamily(
        "tritonwatch_gpu_clock_event_reasons",
        "1 while this reason holds the GPU clocks down (NVML clock event reasons), else 0.",
        labels=[*_GPU_LABELS, "reason"],
    )
    for sample in samples:
        if sample.clock_event_reasons is None:
            continue
        for reason, _bit in CLOCK_EVENT_REASONS:
            active = 1.0 if reason in sample.clock_event_reasons else 0.0
            reasons.add_metric([sample.uuid, index_of[sample.uuid], reason], active)
    return reasons


def _process_memory(samples: Sequence[GpuSample], index_of: Mapping[str, str]) -> Metric:
    processes = GaugeMetricFamily(
        "tritonwatch_gpu_process_memory_used_bytes",
        "GPU memory used by each compute process on the GPU.",
        labels=[*_GPU_LABELS, "pid"],
    )
    for sample in samples:
        for process in sample.processes or ():
            if process.used_memory_bytes is not None:
                labels = [sample.uuid, index_of[sample.uuid], str(process.pid)]
                processes.add_metric(labels, process.used_memory_bytes)
    return processes


def _query_failures(state: NvmlState, index_of: Mapping[str, str]) -> Metric:
    failures = CounterMetricFamily(
        "tritonwatch_nvml_query_failures",
        "NVML queries that failed (NotSupported excluded), by query and NVML error.",
        labels=[*_GPU_LABELS, "query", "error"],
    )
    for (uuid, query, error), count in sorted(state.query_failures.items()):
        failures.add_metric([uuid, index_of.get(uuid, ""), query, error], count)
    return failures
