"""Dashboard (3), GPU: utilisation from NVML and from Triton, SM activity and occupancy
(Hopper GPM), memory, power and energy, clocks and what holds them down, next to the
load on the selected models (an idle GPU while requests queue wants another instance)."""

from __future__ import annotations

from tritonwatch.dashboards.panels import (
    Json,
    Query,
    Row,
    by_query,
    stat,
    state_timeline,
    table,
    thresholds,
    timeseries,
)
from tritonwatch.dashboards.variables import (
    dashboard,
    model_variable,
    query_variable,
    sel,
    target_variable,
)

UID = "tritonwatch-gpu"
TITLE = "tritonwatch / GPU"

LEGEND = "{{gpu_index}} {{gpu}}"
DASHED = {"custom.lineStyle": {"fill": "dash", "dash": [10, 10]}, "custom.fillOpacity": 0}


def _gpu(metric: str, *matchers: str) -> str:
    return metric + "{" + ",".join(['gpu=~"$gpu"', *matchers]) + "}"


def _utilisation_row() -> Row:
    return Row(
        "Utilisation",
        (
            timeseries(
                "GPU utilisation (NVML and Triton)",
                "Fraction of the sample period a kernel ran, from NVML on this host "
                "(source=nvml) and from the DCGM gauge each Triton server prints "
                "(source=triton). It says the GPU was busy, not how much of it was used: "
                "see SM active below.",
                Query(_gpu("tritonwatch_gpu_utilization_ratio"), LEGEND + " {{source}}"),
                unit="percentunit",
                maximum=1,
            ),
            timeseries(
                "SM active, SM occupancy, tensor active (Hopper and newer)",
                "GPM ratios between samples: share of SMs busy, resident warps over the "
                "maximum, tensor-core activity. Empty on GPUs without GPM.",
                Query(_gpu("tritonwatch_gpu_sm_active_ratio"), LEGEND + " SM active"),
                Query(_gpu("tritonwatch_gpu_sm_occupancy_ratio"), LEGEND + " SM occupancy"),
                Query(_gpu("tritonwatch_gpu_tensor_active_ratio"), LEGEND + " tensor active"),
                unit="percentunit",
                maximum=1,
            ),
            timeseries(
                "Model throughput",
                "Inferences per second of the selected models, to read against utilisation.",
                Query(
                    f"tritonwatch_model_throughput_inferences_per_second{sel()}",
                    "{{target}}/{{model}}",
                ),
                unit="short",
            ),
            timeseries(
                "Pending requests",
                "Requests queued in Triton: a queue on an underused GPU asks for another "
                "model instance.",
                Query(f"tritonwatch_model_pending_requests{sel()}", "{{target}}/{{model}}"),
                unit="short",
            ),
        ),
    )


def _memory_power_row() -> Row:
    used = _gpu("tritonwatch_gpu_memory_used_bytes")
    total = _gpu("tritonwatch_gpu_memory_total_bytes")
    return Row(
        "Memory and power",
        (
            timeseries(
                "GPU memory",
                "Memory in use (driver reservation included) against the total (dashed).",
                Query(used, LEGEND + " used"),
                Query(total, LEGEND + " total"),
                unit="bytes",
                width=8,
                overrides=[by_query("B", DASHED)],
            ),
            stat(
                "GPU memory used",
                "Memory in use as a share of the total: little headroom rules out "
                "another model instance.",
                Query(f"{used} / {total}", LEGEND),
                unit="percentunit",
                width=4,
                height=8,
                steps=thresholds((None, "green"), (0.8, "orange"), (0.9, "red")),
            ),
            timeseries(
                "Power",
                "Power draw against the power limit in force (dashed).",
                Query(_gpu("tritonwatch_gpu_power_watts"), LEGEND + " draw"),
                Query(_gpu("tritonwatch_gpu_power_limit_watts"), LEGEND + " limit"),
                unit="watt",
                width=8,
                overrides=[by_query("B", DASHED)],
            ),
            stat(
                "Energy (time range)",
                "Energy the GPUs used over the dashboard's time range.",
                Query(
                    f"increase({_gpu('tritonwatch_gpu_energy_joules_total')}[$__range])",
                    LEGEND,
                ),
                unit="joule",
                width=4,
                height=8,
                steps=thresholds((None, "blue")),
            ),
            timeseries(
                "Memory per process",
                "GPU memory used by each compute process (the Triton server among them).",
                Query(
                    _gpu("tritonwatch_gpu_process_memory_used_bytes"),
                    "{{gpu_index}} pid {{pid}}",
                ),
                unit="bytes",
                stacked=True,
            ),
            timeseries(
                "Memory bandwidth busy",
                "Fraction of the sample period the memory was being read or written.",
                Query(_gpu("tritonwatch_gpu_memory_busy_ratio"), LEGEND),
                unit="percentunit",
                maximum=1,
            ),
        ),
    )


def _clocks_row() -> Row:
    reasons = _gpu("tritonwatch_gpu_clock_event_reasons", 'reason!="gpu_idle"')
    seen = f"{reasons} and on (gpu, reason) (max_over_time({reasons}[$__range]) > 0)"
    return Row(
        "Clocks and temperature",
        (
            timeseries(
                "Clocks",
                "SM and memory clocks: an SM clock below its usual value under load is "
                "throttling (see the reasons).",
                Query(_gpu("tritonwatch_gpu_sm_clock_hertz"), LEGEND + " SM"),
                Query(_gpu("tritonwatch_gpu_memory_clock_hertz"), LEGEND + " memory"),
                unit="hertz",
                width=8,
            ),
            timeseries(
                "Temperature",
                "GPU core temperature.",
                Query(_gpu("tritonwatch_gpu_temperature_celsius"), LEGEND),
                unit="celsius",
                width=8,
                minimum=None,
            ),
            timeseries(
                "Fan speed",
                "Fan speed as a share of its maximum (absent on passively cooled GPUs).",
                Query(_gpu("tritonwatch_gpu_fan_speed_ratio"), LEGEND),
                unit="percentunit",
                width=8,
                maximum=1,
            ),
            state_timeline(
                "Throttle reasons",
                "When NVML reported a reason holding the clocks down (power cap, thermal "
                "slowdown, power brake…); only reasons seen in the time range, idle left out.",
                Query(seen, "{{gpu_index}} {{reason}}"),
            ),
        ),
    )


def _inventory_row() -> Row:
    hide: Json = {"Time": True, "Value": True, "__name__": True}
    return Row(
        "Inventory",
        (
            table(
                "GPUs",
                "The GPUs NVML sees on each watched host (MIG devices with their parent).",
                Query(_gpu("tritonwatch_gpu_info"), instant=True, table=True),
                width=16,
                height=6,
                transformations=[{"id": "organize", "options": {"excludeByName": hide}}],
            ),
            stat(
                "NVML query failures (time range)",
                "NVML calls that failed, by query and error (NotSupported is not a failure).",
                Query(
                    "sum by (query, error) "
                    f"(increase({_gpu('tritonwatch_nvml_query_failures_total')}[$__range]))",
                    "{{query}} {{error}}",
                ),
                unit="short",
                width=8,
                height=6,
                steps=thresholds((None, "green"), (1, "orange")),
            ),
        ),
    )


def build() -> Json:
    """The GPU dashboard."""
    return dashboard(
        UID,
        TITLE,
        "GPU utilisation from NVML and Triton, SM activity, memory, power, clocks and "
        "throttle reasons, next to the load on the selected models.",
        [
            target_variable(),
            model_variable(),
            query_variable("gpu", "GPU", "tritonwatch_gpu_utilization_ratio"),
        ],
        [_utilisation_row(), _memory_power_row(), _clocks_row(), _inventory_row()],
    )
