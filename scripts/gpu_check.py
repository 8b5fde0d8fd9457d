"""GPU check: the NVML collector on a real GPU, idle, under a known load, and after.

Runs the collector with the real ``pynvml`` every 250 ms through three phases: idle,
a bf16 matrix-multiply loop on GPU 0 (PyTorch, in a separate process so the collector
needs no torch), and the cool-down after it. Prints a table per phase and checks that
utilisation and power rose under load and fell after, and that the energy counter
agrees with the power readings. Without PyTorch it says so, skips the load and only
checks that every reading arrives. Exit status: 0 passed, 1 a check failed, 2 no GPU.

Run through ``scripts/gpu_check.sh``, which finds a Python with torch for the load.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import pynvml

from tritonwatch.common.logs import configure_logging
from tritonwatch.records.observations import GpuSample
from tritonwatch.scrape.nvml_sampler import NvmlSampler

SAMPLE_EVERY_SECONDS = 0.25

# Runs in the load process: a bf16 matmul loop on GPU 0 until the deadline.
_LOAD_PROGRAM = """
import sys, time, torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
(a @ b).sum().item()
print("ready", flush=True)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def sample_for(
    collector: NvmlSampler, seconds: float, still_running: Callable[[], bool] = lambda: True
) -> list[GpuSample]:
    """Samples GPU 0 every 250 ms for ``seconds`` (or until ``still_running`` is False)."""
    samples: list[GpuSample] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and still_running():
        started = time.monotonic()
        samples.append(collector.sample()[0])
        time.sleep(max(0.0, SAMPLE_EVERY_SECONDS - (time.monotonic() - started)))
    return samples


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def print_table(phases: dict[str, list[GpuSample]]) -> None:
    header = (
        f"{'phase':<7}{'n':>4}{'util':>7}{'util max':>9}{'power W':>9}{'max W':>8}"
        f"{'SM MHz':>8}{'temp C':>7}{'SM act':>8}{'tensor':>8}{'mem GiB':>9}"
    )
    print(header)
    for phase, samples in phases.items():
        util = [s.utilization_ratio for s in samples]
        power = [s.power_watts for s in samples]
        print(
            f"{phase:<7}{len(samples):>4}{_fmt(_mean(util)):>7}"
            f"{_fmt(max((u for u in util if u is not None), default=None)):>9}"
            f"{_fmt(_mean(power), digits=0):>9}"
            f"{_fmt(max((p for p in power if p is not None), default=None), digits=0):>8}"
            f"{_fmt(_mean([s.sm_clock_hertz for s in samples]), 1e-6, 0):>8}"
            f"{_fmt(max((s.temperature_celsius or 0 for s in samples), default=None), digits=0):>7}"
            f"{_fmt(_mean([s.sm_active_ratio for s in samples])):>8}"
            f"{_fmt(_mean([s.tensor_active_ratio for s in samples])):>8}"
            f"{_fmt(_mean([s.memory_used_bytes for s in samples]), 2**-30):>9}"
        )


def check(phases: dict[str, list[GpuSample]], loaded: bool) -> list[str]:
    """The failed checks, as sentences; empty when all passed."""
    problems: list[str] = []
    every = [s for samples in phases.values() for s in samples]
    for field in ("utilization_ratio", "power_watts", "energy_joules", "memory_total_bytes"):
        if any(getattr(s, field) is None for s in every):
            problems.append(f"{field} missing in some samples")
    energy = [s.energy_joules for s in every if s.energy_joules is not None]
    if energy != sorted(energy):
        problems.append("the energy counter went down")
    if len(every) >= 2 and every[0].energy_joules and every[-1].energy_joules:
        # Mean power from the energy counter vs the mean of the power readings.
        from_energy = (every[-1].energy_joules - every[0].energy_joules) / (
            every[-1].at - every[0].at
        )
        readings = _mean([s.power_watts for s in every]) or 0.0
        if not 0.6 * readings <= from_energy <= 1.4 * readings:
            problems.append(f"energy says {from_energy:.0f} W, power readings {readings:.0f} W")
    if not loaded:
        return problems
    util = {phase: _mean_of(samples, "utilization_ratio") for phase, samples in phases.items()}
    power = {phase: _mean_of(samples, "power_watts") for phase, samples in phases.items()}
    tail = phases["after"][len(phases["after"]) // 2 :]  # power takes ~2 s to settle
    tail_util, tail_power = _mean_of(tail, "utilization_ratio"), _mean_of(tail, "power_watts")
    if not (util["load"] >= 0.5 and util["load"] >= util["idle"] + 0.3):
        problems.append(
            f"utilisation did not rise: idle {util['idle']:.2f}, load {util['load']:.2f}"
        )
    if not power["load"] >= power["idle"] + 50:
        problems.append(
            f"power did not rise: idle {power['idle']:.0f} W, load {power['load']:.0f} W"
        )
    if not tail_util <= 0.2:
        problems.append(f"utilisation did not fall after the load: {tail_util:.2f}")
    if not tail_power <= power["idle"] + 0.5 * (power["load"] - power["idle"]):
        problems.append(f"power did not fall after the load: {tail_power:.0f} W")
    return problems


def _mean_of(samples: Sequence[GpuSample], field: str) -> float:
    """The mean of a reading over samples; NaN when none has it (every check then fails)."""
    mean = _mean([getattr(s, field) for s in samples])
    return math.nan if mean is None else mean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-python", help="a Python with PyTorch and CUDA for the load")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--load-seconds", type=float, default=15.0)
    parser.add_argument("--after-seconds", type=float, default=8.0)
    args = parser.parse_args()
    configure_logging("console", "warning")

    collector = NvmlSampler(pynvml)
    if not collector.start():
        print(f"no GPU to check: NVML is unavailable ({collector.disabled_reason})")
        return 2
    try:
        first = collector.sample()
        if not first:
            print("NVML found no GPU")
            return 2
        print(
            f"GPU 0: {first[0].name} {first[0].uuid}; unsupported: {sorted(first[0].unsupported)}"
        )
        phases = {"idle": sample_for(collector, args.idle_seconds)}
        loaded = args.load_python is not None
        if loaded:
            phases["load"] = run_load(collector, args.load_python, args.load_seconds)
            phases["after"] = sample_for(collector, args.after_seconds)
        else:
            print("PyTorch with CUDA not found: skipping the load part (set LOAD_PYTHON)")
        print_table(phases)
        problems = check(phases, loaded)
    finally:
        collector.close()
    for problem in problems:
        print(f"FAILED: {problem}")
    print("GPU check passed" if not problems else "GPU check failed")
    return 1 if problems else 0


def run_load(collector: NvmlSampler, python: str, seconds: float) -> list[GpuSample]:
    """Starts the matmul loop, waits until it runs, samples while it runs."""
    load = subprocess.Popen(
        [python, "-c", _LOAD_PROGRAM, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert load.stdout is not None
        if load.stdout.readline().strip() != "ready":  # CUDA start and first matmul
            raise RuntimeError(f"the load process did not start (exit {load.wait(30)})")
        return sample_for(collector, seconds, lambda: load.poll() is None)
    finally:
        if load.poll() is None:
            load.terminate()
        load.wait(30)


if __name__ == "__main__":
    sys.exit(main())
