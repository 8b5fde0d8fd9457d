"""Triton's ``/metrics`` text: the same families, HELP texts, types, labels and rules.

Family names, HELP strings and types are copied from Triton's ``metrics.cc`` and real
scrapes (``tests/fixtures/triton_metrics``). Counters have no ``_total`` suffix; label
names print sorted (as prometheus-cpp does) with a summary's ``quantile`` last; integral
values print without decimals and NaN prints as ``Nan``. Per-model series carry
``model`` and ``version`` (as servers from 22.x on do; ~21.05 servers also added
``gpu_uuid``). GPU and CPU gauges come from the last poll of the metrics interval, like
Triton's DCGM poller; the energy counter is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tritonwatch.sim.cache import CacheReading
from tritonwatch.sim.gpu import GpuSample, SharedGpu
from tritonwatch.sim.llm_metrics import render_first_response, render_trtllm, render_vllm
from tritonwatch.sim.repository import ModelRepository, ModelSlot
from tritonwatch.sim.stats import FAILURE_REASONS, STAGES, Ledger

_EXCLUDES = "(does not include cached requests)"
_INCLUDES = "(includes cached requests)"

# (name, type, help) of the per-model counters, in Triton's order, with the ledger value.
_MODEL_COUNTERS: tuple[tuple[str, str, Callable[[Ledger], int]], ...] = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda ledger: ledger.success.count,
    ),
    (
        "nv_inference_count",
        f"Number of inferences performed {_EXCLUDES}",
        lambda ledger: ledger.inference_count,
    ),
    (
        "nv_inference_exec_count",
        f"Number of model executions performed {_EXCLUDES}",
        lambda ledger: ledger.execution_count,
    ),
)
# What each stage measures and whether Triton's text says cached requests are included.
_STAGE_TEXT = {
    "request": ("inference request duration", _INCLUDES),
    "queue": ("inference queuing duration", _INCLUDES),
    "compute_input": ("compute input duration", _EXCLUDES),
    "compute_infer": ("compute inference duration", _EXCLUDES),
    "compute_output": ("inference compute output duration", _EXCLUDES),
}
_DURATION_HELP = {
    stage: f"Cumulative {what} in microseconds {cached}"
    for stage, (what, cached) in _STAGE_TEXT.items()
}
_SUMMARY_HELP = {
    # Real Triton (2.51) words the three compute summaries like the counters.
    stage: (
        f"Summary of {what} in microseconds {cached}"
        if stage in ("request", "queue")
        else _DURATION_HELP[stage]
    )
    for stage, (what, cached) in _STAGE_TEXT.items()
}
_GPU_GAUGES: tuple[tuple[str, str, str, Callable[[SharedGpu, GpuSample], float]], ...] = (
    ("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)", lambda g, s: s.utilization),
    (
        "nv_gpu_memory_total_bytes",
        "gauge",
        "GPU total memory, in bytes",
        lambda g, s: g.spec.memory_total,
    ),
    (
        "nv_gpu_memory_used_bytes",
        "gauge",
        "GPU used memory, in bytes",
        lambda g, s: s.memory_used_bytes,
    ),
    ("nv_gpu_power_usage", "gauge", "GPU power usage in watts", lambda g, s: s.power_watts),
    (
        "nv_gpu_power_limit",
        "gauge",
        "GPU power management limit in watts",
        lambda g, s: g.spec.power_limit_watts,
    ),
    (
        "nv_energy_consumption",
        "counter",
        "GPU energy consumption in joules since the Triton Server started",
        lambda g, s: s.energy_joules,
    ),
)
# The per-model cache counters (µs for durations), printed for a model whose config
# enables its response cache, whether or not the server has a cache (real 2.51).
_CACHE_COUNTERS: tuple[tuple[str, str, Callable[[Ledger], int]], ...] = (
    (
        "nv_cache_num_hits_per_model",
        "Number of cache hits per model",
        lambda ledger: ledger.cache_hit.count,
    ),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda ledger: ledger.cache_microseconds[0],
    ),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        lambda ledger: ledger.cache_miss.count,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        lambda ledger: ledger.cache_microseconds[1],
    ),
)
_CACHE_SUMMARIES = (
    ("nv_cache_hit_summary_per_model", "cache_hit", "hit"),
    ("nv_cache_miss_summary_per_model", "cache_miss", "miss"),
)
# The server-wide cache gauges (only with a server cache), read at the metrics poll.
_CACHE_GAUGES: tuple[tuple[str, str, Callable[[CacheReading], float]], ...] = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]", lambda r: r.utilization),
    ("nv_cache_num_entries", "Number of responses stored in response cache", lambda r: r.entries),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda r: r.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda r: r.misses),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda r: r.lookups),
    (
        "nv_cache_num_evictions",
        "Number of cache evictions in response cache",
        lambda r: r.evictions,
    ),
    (
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
        lambda r: r.lookup_us,
    ),
    (
        "nv_cache_insertion_duration",
        "Total cache insertion duration, in microseconds",
        lambda r: r.insertion_us,
    ),
)
PINNED_POOL_BYTES = 268_435_456
"""Triton's default ``--pinned-memory-pool-byte-size`` (256 MiB)."""


def format_value(value: float) -> str:
    """Prints a sample value as prometheus-cpp does (``161``, ``0.25``, ``Nan``)."""
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass(frozen=True)
class HostSample:
    """CPU readings of the host (Triton's ``nv_cpu_*``)."""

    utilization: float
    memory_total_bytes: int
    memory_used_bytes: int


class HostCpu:
    """Reads ``/proc/stat`` and ``/proc/meminfo`` as Triton's CPU poller does; with
    ``pinned_utilization`` the utilisation is that value whatever the host does (memory
    is still read): a test whose advice must not hang on its neighbours' load."""

    def __init__(
        self, proc_root: Path = Path("/proc"), pinned_utilization: float | None = None
    ) -> None:
        self._proc = proc_root
        self._pinned = pinned_utilization
        self._last_busy_total: tuple[int, int] | None = None
        self._sample = HostSample(pinned_utilization or 0.0, 0, 0)

    def poll(self) -> HostSample:
        """Takes a reading: utilisation since the previous poll, memory now."""
        try:
            fields = [
                int(x) for x in (self._proc / "stat").read_text().split("\n", 1)[0].split()[1:]
            ]
            meminfo = {
                line.split(":")[0]: int(line.split()[1]) * 1024
                for line in (self._proc / "meminfo").read_text().splitlines()
                if len(line.split()) >= 2
            }
        except (OSError, ValueError, IndexError):
            return self._sample
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        total = sum(fields[:8])
        utilization = self._sample.utilization
        if self._last_busy_total is not None:
            last_busy, last_total = self._last_busy_total
            elapsed = total - last_total
            if elapsed > 0:
                utilization = max(0.0, min(1.0, ((total - idle) - last_busy) / elapsed))
        self._last_busy_total = (total - idle, total)
        memory_total = meminfo.get("MemTotal", 0)
        used = memory_total - meminfo.get("MemAvailable", memory_total)
        if self._pinned is not None:
            utilization = self._pinned
        self._sample = HostSample(utilization, memory_total, used)
        return self._sample

    @property
    def last(self) -> HostSample:
        """The reading of the last poll."""
        return self._sample


class _Exposition:
    """Accumulates families and samples in the text format."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(
        self,
        name: str,
        labels: Iterable[tuple[str, str]],
        value: float,
        formatter: Callable[[float], str] | None = None,
    ) -> None:
        pairs = tuple(labels)
        label_text = "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}" if pairs else ""
        self.lines.append(f"{name}{label_text} {(formatter or format_value)(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


ModelLabels = tuple[tuple[str, str], tuple[str, str]]


class MetricsRenderer:
    """Builds the ``/metrics`` body from the repository, the GPUs and the host."""

    def __init__(
        self,
        repository: ModelRepository,
        gpus: list[SharedGpu],
        host: HostCpu,
        *,
        summaries: bool,
        histograms: bool = False,
        cache: Callable[[], CacheReading | None] = lambda: None,
    ) -> None:
        self._cache = cache
        self._repository = repository
        self._gpus = gpus
        self._host = host
        self._summaries = summaries
        self._histograms = histograms

    def render(self, now: float) -> str:
        """The whole exposition as Triton would serve it at loop time ``now``."""
        out = _Exposition()
        rows: list[tuple[ModelSlot, ModelLabels]] = [
            (slot, (("model", slot.spec.name), ("version", slot.spec.version_label)))
            for slot in self._repository.loaded()
        ]
        for index, (name, help_text, read) in enumerate(_MODEL_COUNTERS):
            out.family(name, "counter", help_text)
            for slot, labels in rows:
                out.sample(name, labels, read(slot.series.ledger))
            if index == 0:
                self._failures(out, rows)
        for stage_index, stage in enumerate(STAGES):
            name = f"nv_inference_{stage}_duration_us"
            out.family(name, "counter", _DURATION_HELP[stage])
            for slot, labels in rows:
                out.sample(name, labels, slot.series.ledger.microseconds[stage_index])
        cached = [(slot, labels) for slot, labels in rows if slot.spec.response_cache]
        for name, help_text, read in _CACHE_COUNTERS if cached else ():
            out.family(name, "counter", help_text)
            for slot, labels in cached:
                out.sample(name, labels, read(slot.series.ledger))
        name = "nv_inference_pending_request_count"
        out.family(
            name, "gauge", "Instantaneous number of pending requests awaiting execution per-model."
        )
        for slot, labels in rows:
            out.sample(name, labels, self._repository.pending(slot.spec.name))
        if self._summaries:
            self._summary_families(out, rows, now)
            if cached:
                self._summary_families(out, cached, now, _CACHE_SUMMARIES)
        self._llm_families(out, rows)
        self._host_and_gpus(out)
        reading = self._cache()
        for name, help_text, value in _CACHE_GAUGES if reading is not None else ():
            assert reading is not None
            out.family(name, "gauge", help_text)
            out.sample(name, (), value(reading))
        return out.text()

    def _llm_families(self, out: _Exposition, rows: list[tuple[ModelSlot, ModelLabels]]) -> None:
        engines = [
            (slot, slot.runtime.llm)
            for slot, _ in rows
            if slot.runtime is not None and slot.runtime.llm is not None
        ]
        if self._histograms:
            render_first_response(out, engines)
        render_trtllm(out, [row for row in engines if row[1].spec.backend == "tensorrt_llm"])
        render_vllm(out, [row for row in engines if row[1].spec.backend == "vllm"])

    @staticmethod
    def _failures(out: _Exposition, rows: list[tuple[ModelSlot, ModelLabels]]) -> None:
        name = "nv_inference_request_failure"
        out.family(name, "counter", "Number of failed inference requests, all batch sizes")
        for slot, (model, version) in rows:
            failures = slot.series.ledger.failures_by_reason
            for reason in FAILURE_REASONS:
                out.sample(name, (model, ("reason", reason), version), failures[reason])

    @staticmethod
    def _summary_families(
        out: _Exposition,
        rows: list[tuple[ModelSlot, ModelLabels]],
        now: float,
        families: tuple[tuple[str, str, str], ...] | None = None,
    ) -> None:
        """The five request summaries, or ``families`` (name, window, what): the cache
        ones."""
        chosen = families or tuple(
            (f"nv_inference_{stage}_summary_us", stage, "") for stage in STAGES
        )
        for name, window_name, what in chosen:
            help_text = (
                f"Summary of cache {what} counts/durations per model, in microseconds."
                if what
                else _SUMMARY_HELP[window_name]
            )
            out.family(name, "summary", help_text)
            for slot, labels in rows:
                if window_name == "request" and slot.spec.response_cache:
                    continue  # Triton 2.51 observes no request summary for such a model
                window = slot.series.summaries[window_name]
                out.sample(f"{name}_count", labels, window.count)
                out.sample(f"{name}_sum", labels, window.total)
                for quantile, value in window.quantiles(now):
                    out.sample(name, (*labels, ("quantile", str(quantile))), value)

    def _host_and_gpus(self, out: _Exposition) -> None:
        out.family(
            "nv_pinned_memory_pool_total_bytes",
            "gauge",
            "Pinned memory pool total memory size, in bytes",
        )
        out.sample("nv_pinned_memory_pool_total_bytes", (), PINNED_POOL_BYTES)
        out.family(
            "nv_pinned_memory_pool_used_bytes",
            "gauge",
            "Pinned memory pool used memory size, in bytes",
        )
        out.sample("nv_pinned_memory_pool_used_bytes", (), 0)
        samples = [(gpu, gpu.last_sample()) for gpu in self._gpus]
        for name, kind, help_text, read in _GPU_GAUGES:
            out.family(name, kind, help_text)
            for gpu, sample in samples:
                out.sample(name, (("gpu_uuid", gpu.spec.uuid),), read(gpu, sample))
        host = self._host.last
        for name, help_text, value in (
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", host.utilization),
            (
                "nv_cpu_memory_total_bytes",
                "CPU total memory (RAM), in bytes",
                host.memory_total_bytes,
            ),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", host.memory_used_bytes),
        ):
            out.family(name, "gauge", help_text)
            out.sample(name, (), value)


MALFORMED_TAIL = 'nv_inference_count{model="simulated" version="1"} not-a-number\n'
"""Appended under the ``malformed_metrics`` fault: bad label syntax and a bad value."""
