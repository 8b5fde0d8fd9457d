"""A stand-in for the ``pynvml`` module that replays a recording of a real GPU.

Tests, the demo and users without a GPU pass a :class:`FakeNvml` wherever the NVML
collector takes the ``pynvml`` module. It replays a probe recording such as
``tests/fixtures/nvml/h200_probe.json`` (an H200 idle, under a 30 % and a 100 %
matmul load, and after), one row at a time, and answers with what the real bindings
return: the same function names and signatures, the same units (percent, mW, mJ,
MHz, bytes), and the real ``pynvml.NVMLError`` subclasses, so the collector's
``except`` clauses are exercised for real. Calls can be made to fail on demand
(:meth:`FakeNvml.inject`, for every GPU or one), a GPU can fall off the bus
(:meth:`FakeNvml.lose_gpu`), and :meth:`FakeNvml.missing` plays a machine without the
NVML library. ``gpus`` plays several GPUs that all replay the same recording (GPU 0
keeps the recorded UUID, the others get theirs with the GPU index as the last byte).

What the recording does not hold is derived, and said so where it is:

* GPM metrics: the recording only says GPM is supported. Each metric is the mean
  utilisation of the rows between the two GPM samples times a per-metric share
  (``gpm_shares``), so tests check the collector's arithmetic, not the H200's.
* Processes: the recording says how many ran, not their pid or memory; pids are
  1000, 1001, … and their memory is the row's memory use above the idle
  reservation, split evenly.
* Clock event reasons: the static reading (``GpuIdle``) while utilisation is 0,
  none while the GPU works.
* Memory v2: ``reserved`` is the static v2 reading, ``used`` = total − free − reserved
  (0 when idle, as the real v2 call answered).
* MIG (``mig_devices``): the recording has MIG off. When asked for, MIG devices get
  an equal share of memory and answer ``NotSupported`` to what NVML does not
  support on MIG device handles (utilisation, power, energy, clocks, temperature).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pynvml

_P = ParamSpec("_P")
_R = TypeVar("_R")

DEFAULT_GPM_SHARES: Mapping[int, float] = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 0.9,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 0.5,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.8,
}
"""Synthetic: metric id → share of the mean utilisation the fake reports for it."""

_MIG_MAX_DEVICES = 7  # an H100/H200 splits into at most seven GPU instances


@dataclass(frozen=True)
class _Handle:
    """An opaque device handle, as ``nvmlDeviceGetHandleByIndex`` returns."""

    index: int
    mig_index: int | None = None


@dataclass
class _GpmSample:
    """A GPM sample buffer; ``row`` is the recording row it was taken at."""

    row: int | None = None
    freed: bool = False


class _Record:
    """A struct-like answer (``nvmlFriendlyObject`` and ctypes structs read like this)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@dataclass
class _GpmMetric:
    """Mirrors ``pynvml.c_nvmlGpmMetric_t`` (field names are pynvml's)."""

    metricId: int = 0  # noqa: N815
    nvmlReturn: int = 0  # noqa: N815
    value: float = 0.0


class _GpmMetricsGet:
    """Mirrors ``pynvml.c_nvmlGpmMetricsGet_t``: set the inputs, read ``metrics[i]``."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _GpmSample | None = None
        self.sample2: _GpmSample | None = None
        self.metrics = [_GpmMetric() for _ in range(16)]


def _nvml_call(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Makes a fake NVML function behave like a real one before its body runs:
    uninitialised library, injected errors."""

    @wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        fake = args[0]
        assert isinstance(fake, FakeNvml)
        handle = args[1] if len(args) > 1 and isinstance(args[1], _Handle) else None
        fake.check(method.__name__, handle)
        return method(*args, **kwargs)

    return call


class FakeNvml:
    """Answers the ``pynvml`` calls the NVML sampler makes, from a probe recording.

    Args:
        probe: the parsed recording (``h200_probe.json``'s content).
        clock: when given, the row replayed is the one at ``clock()`` seconds since
            construction (looping over the recording): for demos. Without it the row
            moves only by :meth:`step` and :meth:`seek`: for tests.
        mig_devices: play a GPU in MIG mode with this many MIG devices.
        gpm_shares: see :data:`DEFAULT_GPM_SHARES`.
        gpus: how many GPUs the machine has (each replays the same recording).
    """

    # The real exception classes and the constants the collector reads.
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_Unknown = pynvml.NVMLError_Unknown
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_ArgumentVersionMismatch = pynvml.NVMLError_ArgumentVersionMismatch
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    NVML_GPM_METRIC_SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
    NVML_GPM_METRIC_SM_OCCUPANCY = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    nvmlMemory_v2 = pynvml.nvmlMemory_v2  # noqa: N815 -- pynvml's name
    c_nvmlGpmMetricsGet_t = _GpmMetricsGet  # noqa: N815 -- pynvml's name

    def __init__(
        self,
        probe: Mapping[str, Any],
        *,
        clock: Callable[[], float] | None = None,
        mig_devices: int = 0,
        gpm_shares: Mapping[int, float] = DEFAULT_GPM_SHARES,
        gpus: int = 1,
    ) -> None:
        self.static: Mapping[str, Any] = probe["static"]
        self.gpus = gpus
        self.lost: set[int] = set()
        """Indices of GPUs that fell off the bus (:meth:`lose_gpu`)."""
        self.rows: list[Mapping[str, Any]] = []
        self.phase_starts: dict[str, int] = {}
        for phase in probe["phases"]:
            self.phase_starts[phase["phase"]] = len(self.rows)
            self.rows.extend(phase["rows"])
        if not self.rows:
            raise ValueError("the probe recording has no rows")
        self.row = 0
        self.initialized = False
        self.library_missing = False
        self.calls: list[str] = []
        self._clock = clock
        self._started_at = clock() if clock is not None else 0.0
        self._mig_devices = mig_devices
        self._gpm_shares = dict(gpm_shares)
        self._injected: dict[str, list[tuple[type[Exception], int | None, int | None]]] = {}

    @classmethod
    def from_file(cls, path: Path | str, **options: Any) -> FakeNvml:
        """A fake replaying the probe recording at ``path``."""
        return cls(json.loads(Path(path).read_text()), **options)

    @classmethod
    def missing(cls) -> FakeNvml:
        """A machine without the NVML library: ``nvmlInit`` raises ``LibraryNotFound``."""
        row = {"t": 0.0}
        fake = cls({"static": {}, "phases": [{"phase": "none", "rows": [row]}]})
        fake.library_missing = True
        return fake

    # -- driving the replay ------------------------------------------------------

    def step(self, rows: int = 1) -> None:
        """Moves the replay ``rows`` rows on (stopping at the last row)."""
        self.row = min(self.row + rows, len(self.rows) - 1)

    def seek(self, phase: str, row: int = 0) -> None:
        """Moves the replay to row ``row`` of ``phase`` (idle, duty_30, duty_100, after)."""
        self.row = self.phase_starts[phase] + row

    def now(self) -> float:
        """The recording's time of the current row, in seconds: a clock for the collector."""
        return float(self._current()["t"])

    def inject(
        self,
        function: str,
        error: type[pynvml.NVMLError],
        times: int | None = 1,
        gpu: int | None = None,
    ) -> None:
        """Makes the next ``times`` calls of ``function`` raise ``error`` (None: all),
        on every GPU or only on GPU index ``gpu``."""
        self._injected.setdefault(function, []).append((error, times, gpu))

    def lose_gpu(self, index: int) -> None:
        """GPU ``index`` falls off the bus: its handles answer ``GpuIsLost`` and a new
        enumeration no longer finds it."""
        self.lost.add(index)

    def _present(self) -> list[int]:
        return [index for index in range(self.gpus) if index not in self.lost]

    def check(self, function: str, handle: _Handle | None = None) -> None:
        """Runs before every fake NVML function: records the call, raises what is due."""
        self.calls.append(function)
        if function != "nvmlInit" and not self.initialized:
            raise pynvml.NVMLError_Uninitialized()
        if handle is not None and handle.index in self.lost:
            raise pynvml.NVMLError_GpuIsLost()
        queue = self._injected.get(function, [])
        for position, (error, times, gpu) in enumerate(queue):
            if gpu is not None and (handle is None or handle.index != gpu):
                continue
            if times is not None:
                if times <= 1:
                    queue.pop(position)
                else:
                    queue[position] = (error, times - 1, gpu)
            raise error()

    def _current(self) -> Mapping[str, Any]:
        if self._clock is not None:
            duration = float(self.rows[-1]["t"]) + 0.25
            elapsed = (self._clock() - self._started_at) % duration
            self.row = max(i for i, row in enumerate(self.rows) if row["t"] <= elapsed)
        return self.rows[self.row]

    def _whole_gpu(self, handle: _Handle) -> Mapping[str, Any]:
        """The current row for a whole GPU; MIG device handles get NotSupported."""
        if handle.mig_index is not None:
            raise pynvml.NVMLError_NotSupported()
        return self._current()

    # -- library and devices -------------------------------------------------------

    @_nvml_call
    def nvmlInit(self) -> None:  # noqa: N802 -- pynvml's names, here and below
        if self.library_missing:
            raise pynvml.NVMLError_LibraryNotFound()
        self.initialized = True

    @_nvml_call
    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialized = False

    @_nvml_call
    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self._present())

    @_nvml_call
    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        present = self._present()
        if not 0 <= index < len(present):
            raise pynvml.NVMLError_InvalidArgument()
        return _Handle(present[index])

    @_nvml_call
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:  # noqa: N802
        uuid = str(self.static["uuid"])
        if handle.index:
            uuid = f"{uuid[:-2]}{handle.index:02x}"
        if handle.mig_index is None:
            return uuid
        return f"MIG-{handle.mig_index:08x}{uuid.removeprefix('GPU-')[8:]}"

    @_nvml_call
    def nvmlDeviceGetName(self, handle: _Handle) -> str:  # noqa: N802
        name = str(self.static["name"])
        return name if handle.mig_index is None else f"{name} MIG 1g.18gb"

    @_nvml_call
    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:  # noqa: N802
        return handle.index

    @_nvml_call
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:  # noqa: N802
        mode = 1 if self._mig_devices else 0
        return [mode, mode]

    @_nvml_call
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:  # noqa: N802
        return _MIG_MAX_DEVICES if self._mig_devices else 0

    @_nvml_call
    def nvmlDeviceGetMigDeviceHandleByIndex(  # noqa: N802
        self, handle: _Handle, index: int
    ) -> _Handle:
        if index >= self._mig_devices:
            raise pynvml.NVMLError_NotFound()
        return _Handle(handle.index, index)

    # -- readings ----------------------------------------------------------------------

    @_nvml_call
    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> _Record:  # noqa: N802
        util = self._whole_gpu(handle)["util"]
        return _Record(gpu=int(util["gpu"]), memory=int(util["memory"]))

    @_nvml_call
    def nvmlDeviceGetMemoryInfo(  # noqa: N802
        self, handle: _Handle, version: int | None = None
    ) -> _Record:
        memory = self._current()["mem"]
        total, free = int(memory["total"]), int(memory["free"])
        if handle.mig_index is not None:
            total = free = total // _MIG_MAX_DEVICES
        if not version:
            return _Record(total=total, free=free, used=total - free)
        if version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        reserved = min(int(self.static["memory_info_v2"]["reserved"]), total - free)
        used = total - free - reserved
        return _Record(version=version, total=total, reserved=reserved, free=free, used=used)

    @_nvml_call
    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:  # noqa: N802
        return int(self._whole_gpu(handle)["power_mw"])

    @_nvml_call
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:  # noqa: N802
        self._whole_gpu(handle)
        return int(self.static["power_limit_enforced_mw"])

    @_nvml_call
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:  # noqa: N802
        return int(self._whole_gpu(handle)["energy_mj"])

    @_nvml_call
    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:  # noqa: N802
        row = self._whole_gpu(handle)
        if clock_type == pynvml.NVML_CLOCK_SM:
            return int(row["sm_mhz"])
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return int(self.static["clock_mem_mhz"])
        raise pynvml.NVMLError_InvalidArgument()

    @_nvml_call
    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:  # noqa: N802
        return int(self._whole_gpu(handle)["temp_c"])

    @_nvml_call
    def nvmlDeviceGetTemperatureV(  # noqa: N802
        self, handle: _Handle, sensor: int, version: int | None = None
    ) -> int:
        return int(self._whole_gpu(handle)["temp_c"])

    @_nvml_call
    def nvmlDeviceGetFanSpeed(self, handle: _Handle) -> int:  # noqa: N802
        fan = self.static.get("fan_speed")
        if isinstance(fan, Mapping) and fan.get("error") == "NVMLError_NotSupported":
            raise pynvml.NVMLError_NotSupported()
        return int(fan) if isinstance(fan, int) else 0

    @_nvml_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:  # noqa: N802
        row = self._whole_gpu(handle)
        idle_reasons = int(
            self.static["clock_event_reasons:nvmlDeviceGetCurrentClocksEventReasons"]
        )
        return idle_reasons if row["util"]["gpu"] == 0 else 0

    @_nvml_call
    def nvmlDeviceGetComputeRunningProcesses(  # noqa: N802
        self, handle: _Handle
    ) -> list[_Record]:
        row = self._current()
        count = len(row["procs"])
        above_idle = max(int(row["mem"]["used"]) - int(self.static["memory_info_v1"]["used"]), 0)
        return [
            _Record(pid=1000 + i, usedGpuMemory=above_idle // count, gpuInstanceId=0)
            for i in range(count)
        ]

    # -- GPM (Hopper and newer) -----------------------------------------------------------

    @_nvml_call
    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> _Record:  # noqa: N802
        support = self.static.get("gpm_support") or {"isSupportedDevice": 0}
        return _Record(version=1, isSupportedDevice=int(support["isSupportedDevice"]))

    @_nvml_call
    def nvmlGpmSampleAlloc(self) -> _GpmSample:  # noqa: N802
        return _GpmSample()

    @_nvml_call
    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:  # noqa: N802
        sample.freed = True

    @_nvml_call
    def nvmlGpmSampleGet(self, handle: _Handle, sample: _GpmSample) -> _GpmSample:  # noqa: N802
        self._whole_gpu(handle)
        sample.row = self.row
        return sample

    @_nvml_call
    def nvmlGpmMetricsGet(self, request: _GpmMetricsGet) -> _GpmMetricsGet:  # noqa: N802
        first, second = request.sample1, request.sample2
        if first is None or second is None or first.row is None or second.row is None:
            raise pynvml.NVMLError_InvalidArgument()
        rows = self.rows[min(first.row, second.row) + 1 : max(first.row, second.row) + 1]
        mean_percent = sum(row["util"]["gpu"] for row in rows) / len(rows) if rows else 0.0
        for metric in request.metrics[: request.numMetrics]:
            share = self._gpm_shares.get(metric.metricId)
            if share is None:
                metric.nvmlReturn, metric.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, mean_percent * share
        return request
