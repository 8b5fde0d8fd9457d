"""Reads the local GPUs through NVML (``nvidia-ml-py``) into :class:`GpuSample` records.

The ``pynvml`` module is a parameter, so tests and demos pass a
:class:`~tritonwatch.scrape.nvml_fake.FakeNvml`. Each query stands alone: one that a
device answers ``NotSupported`` (fan speed on a passively cooled H200, most queries
on MIG device handles) is remembered and not asked again; one that fails with any
other NVML error (``GpuIsLost``, ``Unknown``, …) leaves that reading None, is
recorded in the sample and counted, and every other reading is kept. Without the
NVML library (no driver, a CPU-only host) the collector is disabled after one log
line and every call is a no-op, never an exception.

Units are converted to base units at the source: percent → ratio, mW → W, mJ → J,
MHz → Hz. Memory "used" is total − free: memory no process can allocate, the driver's
reservation included. NVML's v1 call reports exactly that as ``used``; the v2 call
(driver 510+) and today's ``nvidia-smi`` split the reservation off (``used`` 0 and
``reserved`` 616 MiB on the idle H200 of the fixture). total − free is the same
number on every driver and is what capacity decisions need (free = total − used);
the reservation is kept apart in ``memory_reserved_bytes`` where v2 exists, so v2's
own ``used`` is ``memory_used_bytes − memory_reserved_bytes``.

GPM (Hopper and newer): SM activity, SM occupancy and tensor activity are computed by
NVML between two GPM samples. Each :meth:`NvmlSampler.sample` takes one GPM sample
and computes the metrics against the previous one when at least
``gpm_min_interval_seconds`` (100 ms by default; shorter windows give noisy ratios)
has passed, so the first sample has no GPM ratios and nothing ever sleeps.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from tritonwatch.common.logs import get_logger
from tritonwatch.records.observations import (
    CLOCK_EVENT_REASONS,
    GpuProcess,
    GpuSample,
    NvmlState,
    QueryFailureKey,
)

_log = get_logger("nvml")
_T = TypeVar("_T")


GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("sm_active_ratio", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy_ratio", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("tensor_active_ratio", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
)
"""GpuSample field → the pynvml constant of its GPM metric (0–100 %)."""

LIBRARY_GONE_ERRORS = frozenset(
    {"NVMLError_Uninitialized", "NVMLError_DriverNotLoaded", "NVMLError_LibRmVersionMismatch"}
)
"""Errors that say the library itself stopped answering (driver unloaded or upgraded
under a running daemon), not one device or one query: a reason to initialise again."""
DEFAULT_REINIT_INTERVAL_SECONDS = 30.0


@dataclass
class _Gpm:
    """A device's two GPM sample buffers: the last one taken, and one to take next."""

    previous: Any
    spare: Any
    previous_at: float | None = None


@dataclass
class _Device:
    """A GPU or MIG device found at start, and what it answered ``NotSupported`` to."""

    handle: Any
    uuid: str
    name: str
    index: int
    mig_index: int | None = None
    parent_uuid: str | None = None
    unsupported: set[str] = field(default_factory=set)
    gpm: _Gpm | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)


class NvmlSampler:
    """Samples every local GPU (and MIG device) through NVML.

    Args:
        nvml: the ``pynvml`` module or a stand-in with the same functions; ``None``
            imports ``pynvml`` on :meth:`start`.
        clock: the monotonic clock stamped on samples and used to space GPM samples.
        gpm_min_interval_seconds: the least time between two GPM samples whose
            metrics are computed.
        reinit_interval_seconds: while the library answers every query with "not
            initialised" or "driver not loaded", how often to initialise it again and
            re-enumerate the devices (so a driver reload heals without a restart).
    """

    def __init__(
        self,
        nvml: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        gpm_min_interval_seconds: float = 0.1,
        reinit_interval_seconds: float = DEFAULT_REINIT_INTERVAL_SECONDS,
    ) -> None:
        self._nvml = nvml
        self._reinit_interval = reinit_interval_seconds
        self._last_reinit: float | None = None
        self._clock = clock
        self._gpm_min_interval = gpm_min_interval_seconds
        self._lock = threading.Lock()
        self._devices: list[_Device] = []
        self._enabled = False
        self._disabled_reason: str | None = "not started"
        self._latest: tuple[GpuSample, ...] = ()
        self._failure_totals: Counter[QueryFailureKey] = Counter()

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def disabled_reason(self) -> str | None:
        """Why there are no samples (no NVML library, not started, closed); None when enabled."""
        return self._disabled_reason

    def start(self) -> bool:
        """Initialises NVML and finds the devices; False (and one log line) without NVML."""
        with self._lock:
            if self._enabled:
                return True
            if self._nvml is None:
                try:
                    self._nvml = importlib.import_module("pynvml")
                except ImportError as error:
                    return self._disable(f"pynvml is not installed: {error}")
            try:
                self._nvml.nvmlInit()
            except (self._nvml.NVMLError, OSError) as error:
                return self._disable(f"{type(error).__name__}: {error}")
            self._devices = self._find_devices()
            self._enabled, self._disabled_reason = True, None
            _log.info(
                "nvml_started",
                devices=[(d.index, d.mig_index, d.uuid, d.name) for d in self._devices],
            )
            return True

    def _disable(self, reason: str) -> bool:
        self._enabled, self._disabled_reason = False, reason
        _log.info("nvml_disabled", reason=reason)
        return False

    def close(self) -> None:
        """Frees GPM buffers and shuts NVML down; the collector can be started again."""
        with self._lock:
            if not self._enabled:
                return
            self._free_gpm_buffers()
            self._call_quietly(self._nvml.nvmlShutdown)
            self._devices, self._latest = [], ()
            self._enabled, self._disabled_reason = False, "closed"

    def _call_quietly(self, call: Callable[[], object]) -> None:
        try:
            call()
        except self._nvml.NVMLError as error:
            _log.debug("nvml_cleanup_failed", error=str(error))

    def state(self) -> NvmlState:
        """The latest samples and the failure counts so far (for the exporter)."""
        with self._lock:
            failures = MappingProxyType(dict(self._failure_totals))
            return NvmlState(self._enabled, self._latest, failures)

    def sample(self) -> tuple[GpuSample, ...]:
        """Reads every device once; an empty tuple when disabled."""
        with self._lock:
            if not self._enabled:
                return ()
            samples = tuple(self._read(device) for device in self._devices)
            if _library_gone(samples) and self._reinit_due() and self._reinitialise():
                samples = tuple(self._read(device) for device in self._devices)
            for sample in samples:
                for query, error in sample.failures:
                    key = (sample.uuid, query, error)
                    self._failure_totals[key] += 1
                    if self._failure_totals[key] == 1:  # later ones only count
                        _log.warning("nvml_query_failed", gpu=sample.uuid, query=query, error=error)
            self._latest = samples
            return samples

    # -- recovery -------------------------------------------------------------------

    def _reinit_due(self) -> bool:
        now = self._clock()
        if self._last_reinit is not None and now - self._last_reinit < self._reinit_interval:
            return False
        self._last_reinit = now
        return True

    def _reinitialise(self) -> bool:
        """Shuts the library down (quietly), initialises it again and re-enumerates the
        devices; True when it answers again. The failure counters are kept."""
        nvml = self._nvml
        self._free_gpm_buffers()
        self._call_quietly(nvml.nvmlShutdown)
        try:
            nvml.nvmlInit()
        except (nvml.NVMLError, OSError) as error:
            _log.info("nvml_reinit_failed", error=f"{type(error).__name__}: {error}")
            return False
        self._devices = self._find_devices()
        _log.warning(
            "nvml_reinitialised",
            devices=[(d.index, d.mig_index, d.uuid, d.name) for d in self._devices],
        )
        return True

    def _free_gpm_buffers(self) -> None:
        """Frees each device's GPM buffers once (a failed re-initialisation may be
        followed by another, which must not free them again)."""
        for device in self._devices:
            if device.gpm is not None:
                for buffer in (device.gpm.previous, device.gpm.spare):
                    self._call_quietly(functools.partial(self._nvml.nvmlGpmSampleFree, buffer))
                device.gpm = None

    # -- discovery ------------------------------------------------------------------

    def _find_devices(self) -> list[_Device]:
        nvml = self._nvml
        devices: list[_Device] = []
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            _log.warning("nvml_device_count_failed", error=str(error))
            return devices
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                device = _Device(
                    handle, nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle), index
                )
            except nvml.NVMLError as error:
                _log.warning("nvml_device_skipped", gpu_index=index, error=str(error))
                continue
            device.gpm = self._gpm_buffers(device)
            devices.append(device)
            devices.extend(self._mig_devices(device))
        return devices

    def _mig_devices(self, parent: _Device) -> list[_Device]:
        """The MIG devices of a GPU in MIG mode (none when MIG is off or unsupported)."""
        nvml = self._nvml
        try:
            current_mode, _pending = nvml.nvmlDeviceGetMigMode(parent.handle)
            if current_mode != nvml.NVML_DEVICE_MIG_ENABLE:
                return []
            slots = nvml.nvmlDeviceGetMaxMigDeviceCount(parent.handle)
        except nvml.NVMLError:
            return []  # pre-Ampere GPUs answer NotSupported
        found = []
        for slot in range(slots):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot)
                uuid, name = nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle)
            except nvml.NVMLError:
                continue  # an empty slot answers NotFound
            found.append(_Device(handle, uuid, name, parent.index, slot, parent.uuid))
        return found

    def _gpm_buffers(self, device: _Device) -> _Gpm | None:
        nvml = self._nvml
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice:
                return None
            return _Gpm(nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc())
        except (nvml.NVMLError, AttributeError):
            return None  # pre-Hopper GPUs, or bindings older than GPM

    # -- reading --------------------------------------------------------------------------

    def _query(self, device: _Device, query: str, call: Callable[[], _T]) -> _T | None:
        """One NVML query that degrades alone: None when unsupported or failed."""
        if query in device.unsupported:
            return None
        nvml = self._nvml
        try:
            return call()
        except nvml.NVMLError_NotSupported:
            device.unsupported.add(query)
        except (nvml.NVMLError, *_version_mismatch(nvml)) as error:
            device.failures.append((query, type(error).__name__))
        return None

    def _read(self, device: _Device) -> GpuSample:
        nvml, handle = self._nvml, device.handle
        at = self._clock()
        device.failures = []

        def query(name: str, call: Callable[[], _T]) -> _T | None:
            return self._query(device, name, call)

        utilization = query("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = query("memory", lambda: self._memory(handle))
        power = query("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        limit = query("power_limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        energy = query("energy", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        sm_clock = query(
            "sm_clock", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
        )
        memory_clock = query(
            "memory_clock", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
        )
        temperature = query("temperature", lambda: self._temperature(handle))
        fan = query("fan_speed", lambda: nvml.nvmlDeviceGetFanSpeed(handle))
        reasons = query("clock_event_reasons", lambda: self._clock_event_reasons(handle))
        processes = query("processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        gpm = query("gpm", lambda: self._gpm(device, at)) or {}
        total, used, reserved = memory if memory is not None else (None, None, None)
        return GpuSample(
            at=at,
            uuid=device.uuid,
            index=device.index,
            name=device.name,
            mig_index=device.mig_index,
            parent_uuid=device.parent_uuid,
            utilization_ratio=None if utilization is None else utilization.gpu / 100,
            memory_utilization_ratio=None if utilization is None else utilization.memory / 100,
            memory_used_bytes=used,
            memory_total_bytes=total,
            memory_reserved_bytes=reserved,
            power_watts=_scaled(power, 1e-3),
            power_limit_watts=_scaled(limit, 1e-3),
            energy_joules=_scaled(energy, 1e-3),
            sm_clock_hertz=_scaled(sm_clock, 1e6),
            memory_clock_hertz=_scaled(memory_clock, 1e6),
            temperature_celsius=None if temperature is None else float(temperature),
            fan_speed_ratio=_scaled(fan, 0.01),
            clock_event_reasons=reasons,
            processes=None if processes is None else tuple(_process(p) for p in processes),
            sm_active_ratio=gpm.get("sm_active_ratio"),
            sm_occupancy_ratio=gpm.get("sm_occupancy_ratio"),
            tensor_active_ratio=gpm.get("tensor_active_ratio"),
            unsupported=frozenset(device.unsupported),
            failures=tuple(device.failures),
        )

    def _memory(self, handle: Any) -> tuple[int, int, int | None]:
        """(total, total − free, reserved or None) from the v2 call, else the v1 call."""
        nvml = self._nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
                return int(info.total), int(info.total - info.free), int(info.reserved)
            except (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_ArgumentVersionMismatch):
                pass  # a driver older than the v2 call
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.total - info.free), None

    def _call_newest(self, names: tuple[str, ...], *args: Any) -> Any:
        """Calls the first of ``names`` that both the bindings and the driver have.

        NVML renames calls over time (``nvmlDeviceGetTemperature`` → ``…V``, clock
        "throttle" → "event" reasons); the newest is preferred, older drivers and
        bindings get the older one.
        """
        nvml = self._nvml
        for name in names[:-1]:
            function = getattr(nvml, name, None)
            if function is not None:
                try:
                    return function(*args)
                except nvml.NVMLError_FunctionNotFound:
                    continue
        return getattr(nvml, names[-1])(*args)

    def _temperature(self, handle: Any) -> int:
        names = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")
        return int(self._call_newest(names, handle, self._nvml.NVML_TEMPERATURE_GPU))

    def _clock_event_reasons(self, handle: Any) -> frozenset[str]:
        names = (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        )
        bits = int(self._call_newest(names, handle))
        return frozenset(reason for reason, bit in CLOCK_EVENT_REASONS if bits & bit)

    def _gpm(self, device: _Device, at: float) -> dict[str, float | None] | None:
        """GPM ratios since the previous GPM sample; None on the first or a too-early call."""
        state = device.gpm
        if state is None:
            return None
        if state.previous_at is not None and at - state.previous_at < self._gpm_min_interval:
            return None
        nvml = self._nvml
        try:
            nvml.nvmlGpmSampleGet(device.handle, state.spare)
        except nvml.NVMLError:
            state.previous_at = None  # the next sample starts a fresh pair
            raise
        first = state.previous_at is None
        state.previous, state.spare, state.previous_at = state.spare, state.previous, at
        if first:
            return None
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = state.spare, state.previous
        for slot, (_field, constant) in enumerate(GPM_METRICS):
            request.metrics[slot].metricId = getattr(nvml, constant)
        nvml.nvmlGpmMetricsGet(request)
        return {
            name: request.metrics[slot].value / 100.0
            if request.metrics[slot].nvmlReturn == nvml.NVML_SUCCESS
            else None
            for slot, (name, _constant) in enumerate(GPM_METRICS)
        }


def _version_mismatch(nvml: Any) -> tuple[type[Exception], ...]:
    """pynvml raises ``NVMLLibraryMismatchError`` (not an ``NVMLError``) when an
    unversioned call such as ``nvmlDeviceGetComputeRunningProcesses`` is missing from
    the driver: one query's failure like any other."""
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    return (mismatch,) if mismatch is not None else ()


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else float(value) * factor


def _process(info: Any) -> GpuProcess:
    used = getattr(info, "usedGpuMemory", None)
    return GpuProcess(pid=int(info.pid), used_memory_bytes=None if used is None else int(used))


def _library_gone(samples: tuple[GpuSample, ...]) -> bool:
    """Every device failed, and only with errors of the library itself."""
    return bool(samples) and all(
        sample.failures and {error for _, error in sample.failures} <= LIBRARY_GONE_ERRORS
        for sample in samples
    )
