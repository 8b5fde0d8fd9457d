"""A sweep's results as people and tools read them: a table that fits the terminal,
CSV (perf_analyzer's columns and units, so existing spreadsheets and scripts read it),
JSON (everything), and a plot of throughput and p95 against the load level with the
budget, knee and operating point marked (SVG written here; PNG through matplotlib when
it is installed).

A streaming sweep (``settings.measure`` TTFT or ITL) has no perf_analyzer columns to
match: its table and CSV hold output tokens/s, requests/s and the TTFT, ITL and
per-request ITL (genai-perf's ITL, vLLM's TPOT) quantiles, its plot output tokens/s with
TTFT and ITL p95 against concurrency, the budget drawn on the measure it was judged on.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tritonwatch.common.terminal_table import Column, render_table
from tritonwatch.records.sweep_records import (
    MEASURE_NAMES,
    SERVER_STAGES,
    Measure,
    StepResult,
    SweepResult,
)

STREAM_CSV_COLUMNS = (
    "Concurrency",
    "Output Tokens/Second",
    "Requests/Second",
    "Error Rate",
    "TTFT p50",
    "TTFT p90",
    "TTFT p95",
    "TTFT p99",
    "ITL p50",
    "ITL p90",
    "ITL p95",
    "ITL p99",
    "TPOT p50",
    "TPOT p95",
    "Latency p50",
    "Latency p95",
)
"""A streaming sweep's CSV: latencies in microseconds, as perf_analyzer's; TPOT is the
per-request ITL (genai-perf's ITL)."""
PERF_ANALYZER_COLUMNS = (
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
)


def _ns(seconds: float) -> int:
    """Whole nanoseconds, the unit perf_analyzer (and Triton's statistics) count in."""
    return round(seconds * 1e9)


def _us(nanoseconds: int) -> int:
    """perf_analyzer's integer division: 1999 ns is 1 µs, not 2."""
    return max(0, nanoseconds) // 1000


def client_network_seconds(step: StepResult) -> float | None:
    """What the client and the network add to the step's mean latency: the client's
    mean minus Triton's mean request time from the statistics deltas of the same step.

    As measured (it can be slightly negative when the two means cover slightly different
    spans); None without server statistics or without a completed request. Unlike
    the CSV's Network+Server Send/Recv, it leaves out Triton's time outside its stage
    timers (``request_seconds`` minus queue and compute), which is the server's.
    """
    if step.server is None or not step.requests:
        return None
    return step.latency["avg"] - step.server.request_seconds


def client_network_share(step: StepResult) -> float | None:
    """:func:`client_network_seconds` over the client's mean latency."""
    residual = client_network_seconds(step)
    mean = step.latency["avg"]
    return residual / mean if residual is not None and mean > 0 else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def streaming(result: SweepResult) -> bool:
    """Judged on TTFT or ITL: the sweep streamed."""
    return result.settings.measure != "latency"


def throughput_unit(result: SweepResult) -> str:
    """What the knee and the operating point's throughput count."""
    return "output tokens/s" if streaming(result) else "infer/s"


def judged_on(result: SweepResult) -> str:
    """The throughput and the latency the knee, budget and operating point were judged on."""
    measure = result.settings.measure
    if measure == "latency":
        return "judged on inferences/s and p95 latency"
    return f"judged on output tokens/s and {MEASURE_NAMES[measure]} p95"


def _stream_quantiles(
    step: StepResult,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """TTFT, ITL and per-request ITL of a streaming step (zeros where absent)."""
    empty = dict.fromkeys(("p50", "p90", "p95", "p99", "avg"), 0.0)
    return step.ttft or empty, step.itl or empty, step.itl_per_request or empty


def _notes(result: SweepResult, step: StepResult) -> str:
    notes = []
    if result.knee and step.level == result.knee.concurrency:
        notes.append("knee")
    if result.operating_point and step.level == result.operating_point.level:
        notes.append("operating point")
    if step.generator_bound:
        notes.append("client-bound")
    return ", ".join(notes)


def to_text(result: SweepResult, width: int | None = None) -> list[str]:
    """One row per step, as lines that fit ``width`` (default: the terminal's).

    At 80 columns: level, infer/s, p50/p95/p99, errors, stability and client+net (the
    client's mean minus Triton's mean request time over the step: what the network,
    serialisation and this client add); wider terminals add the queue and compute
    means, p90 and the request count; the notes (knee, operating point, client-bound)
    go under their row when they do not fit in it.
    """
    if streaming(result):
        return _stream_text(result, width)
    first = "rate/s" if result.settings.mode == "rate" else "concurrency"
    columns = (
        Column(first),
        Column("infer/s"),
        Column("p50 ms", 3),
        Column("p90 ms", 6),
        Column("p95 ms"),
        Column("p99 ms", 2),
        Column("err %"),
        Column("queue ms", 5),
        Column("compute ms", 5),
        Column("client+net ms", 4),
        Column("stable", 1),
        Column("requests", 7),
        Column("note", align="left", note=True),
    )
    rows = []
    for step in result.steps:
        server = step.server
        compute = sum(v for k, v in server.stage_seconds.items() if k != "queue") if server else 0
        residual = client_network_seconds(step)  # the JSON's client_network_seconds
        rows.append(
            (
                f"{step.level:g}",
                f"{step.inferences_per_second:.1f}",
                *(_ms(step.latency[p]) for p in ("p50", "p90", "p95", "p99")),
                f"{step.error_rate * 100:.1f}",
                _ms(server.stage_seconds["queue"]) if server else "-",
                _ms(compute) if server else "-",
                "-" if residual is None else _ms(residual),
                "yes" if step.stable else "NO",
                str(step.requests),
                _notes(result, step),
            )
        )
    title = f"{result.settings.model} over {result.settings.protocol}"
    return render_table(columns, rows, width, title)


def _stream_text(result: SweepResult, width: int | None) -> list[str]:
    """A streaming sweep's rows: at 80 columns concurrency, tokens/s, TTFT p50/p95, ITL
    p50/p95 and errors; wider terminals add stability, TPOT p50 (genai-perf's ITL),
    requests/s, the p99s and the request count."""
    columns = (
        Column("concurrency"),
        Column("tok/s"),
        Column("req/s", 3),
        Column("TTFT p50 ms"),
        Column("TTFT p95 ms"),
        Column("TTFT p99 ms", 4),
        Column("ITL p50 ms"),
        Column("ITL p95 ms"),
        Column("ITL p99 ms", 5),
        Column("TPOT p50 ms", 2),
        Column("err %"),
        Column("stable", 1),
        Column("requests", 6),
        Column("note", align="left", note=True),
    )
    rows = []
    for step in result.steps:
        ttft, itl, tpot = _stream_quantiles(step)
        rows.append(
            (
                f"{step.level:g}",
                f"{step.throughput:.1f}",
                f"{step.requests_per_second:.1f}",
                _ms(ttft["p50"]),
                _ms(ttft["p95"]),
                _ms(ttft["p99"]),
                _ms(itl["p50"]),
                _ms(itl["p95"]),
                _ms(itl["p99"]),
                _ms(tpot["p50"]),
                f"{step.error_rate * 100:.1f}",
                "yes" if step.stable else "NO",
                str(step.requests),
                _notes(result, step),
            )
        )
    settings = result.settings
    title = f"{settings.model} over {settings.protocol}, streaming ({judged_on(result)})"
    return render_table(columns, rows, width, title)


def _stream_csv(result: SweepResult) -> str:
    """:data:`STREAM_CSV_COLUMNS`, one row per step by increasing concurrency."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(STREAM_CSV_COLUMNS)
    for step in sorted(result.steps, key=lambda s: s.level):
        ttft, itl, tpot = _stream_quantiles(step)
        writer.writerow(
            (
                f"{step.level:g}",
                f"{step.throughput:.6g}",
                f"{step.requests_per_second:.6g}",
                f"{step.error_rate:.6g}",
                *(_us(_ns(ttft[p])) for p in ("p50", "p90", "p95", "p99")),
                *(_us(_ns(itl[p])) for p in ("p50", "p90", "p95", "p99")),
                *(_us(_ns(tpot[p])) for p in ("p50", "p95")),
                *(_us(_ns(step.latency[p])) for p in ("p50", "p95")),
            )
        )
    return out.getvalue()


def to_csv(result: SweepResult) -> str:
    """perf_analyzer's ``-f`` format, column for column and as it computes them.

    Microseconds truncated from whole nanoseconds; Inferences/Second and a rate level
    as C++ streams a double (six significant digits); rows by increasing inferences/s.
    Network+Server Send/Recv is perf_analyzer's "network misc": the client's mean
    latency minus Client Send and Recv minus the server's queue and compute means,
    clamped at 0, so it holds Triton's time outside its stage timers too. We send
    pre-encoded requests and do not decode answers on the hot path, so Client Send and
    Client Recv are 0 (perf_analyzer measures its own (un)marshalling there) and that
    time lands in Network+Server Send/Recv.
    """
    if streaming(result):
        return _stream_csv(result)
    first = "Request Rate" if result.settings.mode == "rate" else "Concurrency"
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((first, *PERF_ANALYZER_COLUMNS))
    for step in sorted(result.steps, key=lambda s: s.inferences_per_second):
        stages = step.server.stage_seconds if step.server else dict.fromkeys(SERVER_STAGES, 0.0)
        stage_ns = {stage: _ns(stages[stage]) for stage in SERVER_STAGES}
        network_misc = _ns(step.latency["avg"]) - sum(stage_ns.values())
        writer.writerow(
            (
                f"{step.level:g}",
                f"{step.inferences_per_second:.6g}",
                0,
                _us(network_misc),
                *(_us(stage_ns[s]) for s in SERVER_STAGES),
                0,
                *(_us(_ns(step.latency[p])) for p in ("p50", "p90", "p95", "p99")),
            )
        )
    return out.getvalue()


def to_json(result: SweepResult) -> dict[str, Any]:
    """Every number the sweep has, in base units (seconds, per second)."""
    settings = asdict(result.settings)
    settings["inputs"] = {k: v.model_dump(mode="json") for k, v in result.settings.inputs.items()}
    settings["stream"] = result.settings.stream.model_dump(mode="json")
    return {
        "settings": settings,
        "steps": [_step_json(step) for step in result.steps],
        "knee": asdict(result.knee) if result.knee else None,
        "judged_on": judged_on(result),
        "operating_point": result.operating_point.level if result.operating_point else None,
        "stopped_at_budget": result.stopped_at_budget,
        "warnings": list(result.warnings),
    }


def _step_json(step: StepResult) -> dict[str, Any]:
    data = asdict(step)
    data.pop("latency_samples")  # thousands of numbers; the quantiles say it
    data["client_network_seconds"] = client_network_seconds(step)
    data["client_network_share"] = client_network_share(step)
    return data


_WIDTH, _HEIGHT, _LEFT, _RIGHT, _TOP, _BOTTOM = 720, 420, 70, 70, 40, 50


def _x_scale(levels: list[float]) -> Any:
    geometric = len(levels) > 2 and min(levels) > 0 and max(levels) / min(levels) >= 8
    low, high = (
        (math.log2(min(levels)), math.log2(max(levels)))
        if geometric
        else (min(levels), max(levels))
    )
    span = (high - low) or 1.0
    width = _WIDTH - _LEFT - _RIGHT

    def scale(level: float) -> float:
        value = math.log2(level) if geometric else level
        return _LEFT + (value - low) / span * width

    return scale


LATENCY_COLOURS = ("firebrick", "darkorange")


def _latency_series(result: SweepResult, steps: list[StepResult]) -> list[tuple[str, list[float]]]:
    """The plot's latency lines (seconds), the one the sweep was judged on first: p95, or
    a streaming sweep's TTFT and ITL p95."""
    if not streaming(result):
        return [("p95", [s.p95 for s in steps])]
    order: tuple[Measure, Measure] = (
        ("ttft", "itl") if result.settings.measure == "ttft" else ("itl", "ttft")
    )
    return [
        (f"{MEASURE_NAMES[measure]} p95", [s.quantiles(measure)["p95"] for s in steps])
        for measure in order
    ]


def _throughput_label(result: SweepResult) -> str:
    return "output tokens/s" if streaming(result) else "inferences/s"


def render_svg(result: SweepResult) -> str:
    """Throughput (left axis) and p95 (right axis) against the load level; for a
    streaming sweep output tokens/s, and TTFT and ITL p95."""
    steps = [s for s in result.steps if s.requests]
    if not steps:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="60"><text x="10" y="30">no data</text></svg>'
    x = _x_scale([s.level for s in steps])
    top_x = max(s.throughput for s in steps) * 1.1 or 1.0
    budget = result.settings.budget_p95
    series = _latency_series(result, steps)
    judged_label, judged = series[0]
    every = [v for _, values in series for v in values]
    top_p95 = max(every + ([budget] if budget else [])) * 1.1 or 1.0
    plot_height = _HEIGHT - _TOP - _BOTTOM

    def y_throughput(value: float) -> float:
        return _TOP + plot_height * (1 - value / top_x)

    def y_latency(value: float) -> float:
        return _TOP + plot_height * (1 - value / top_p95)

    def polyline(points: list[tuple[float, float]], colour: str, css: str) -> str:
        text = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        return f'<polyline class="{css}" fill="none" stroke="{colour}" stroke-width="2" points="{text}"/>'

    label = "request rate (/s)" if result.settings.mode == "rate" else "concurrency"
    names = " and ".join(name for name, _ in series)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<text x="{_WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{result.settings.model}: throughput and {names} by {label}</text>',
        f'<line x1="{_LEFT}" y1="{_HEIGHT - _BOTTOM}" x2="{_WIDTH - _RIGHT}" y2="{_HEIGHT - _BOTTOM}" stroke="black"/>',
        f'<text x="{_WIDTH / 2}" y="{_HEIGHT - 10}" text-anchor="middle">{label}</text>',
        f'<text x="15" y="{_TOP - 10}" fill="steelblue">{_throughput_label(result)} (max {top_x / 1.1:.0f})</text>',
        f'<text x="{_WIDTH - 15}" y="{_TOP - 10}" text-anchor="end" fill="firebrick">{names} ms (max {top_p95 / 1.1 * 1e3:.1f})</text>',
        polyline(
            [(x(s.level), y_throughput(s.throughput)) for s in steps], "steelblue", "throughput"
        ),
    ]
    for (name, values), colour in zip(series, LATENCY_COLOURS, strict=False):
        css = "latency " + name.split()[0].lower()
        parts.append(
            polyline(
                [(x(s.level), y_latency(v)) for s, v in zip(steps, values, strict=True)],
                colour,
                css,
            )
        )
    for step, value in zip(steps, judged, strict=True):
        parts.append(
            f'<text x="{x(step.level):.1f}" y="{_HEIGHT - _BOTTOM + 15}" text-anchor="middle">{step.level:g}</text>'
        )
        parts.append(
            f'<circle class="step" cx="{x(step.level):.1f}" cy="{y_latency(value):.1f}" r="4" '
            f'fill="firebrick"><title>{_step_tooltip(step)}</title></circle>'
        )
    if budget:
        yb = y_latency(budget)
        parts.append(
            f'<line class="budget" x1="{_LEFT}" y1="{yb:.1f}" x2="{_WIDTH - _RIGHT}" y2="{yb:.1f}" stroke="firebrick" stroke-dasharray="6,4"/>'
        )
        parts.append(
            f'<text x="{_WIDTH - _RIGHT}" y="{yb - 4:.1f}" text-anchor="end" fill="firebrick">budget {judged_label} {budget * 1e3:g} ms</text>'
        )
    if result.knee:
        kx = x(result.knee.concurrency)
        parts.append(
            f'<circle class="knee" cx="{kx:.1f}" cy="{y_throughput(result.knee.throughput):.1f}" r="6" fill="none" stroke="black" stroke-width="2"/>'
        )
        parts.append(
            f'<text x="{kx + 8:.1f}" y="{y_throughput(result.knee.throughput) + 16:.1f}">knee</text>'
        )
    if result.operating_point:
        op = result.operating_point
        parts.append(
            f'<rect class="operating-point" x="{x(op.level) - 5:.1f}" y="{y_throughput(op.throughput) - 5:.1f}" width="10" height="10" fill="seagreen"/>'
        )
        parts.append(
            f'<text x="{x(op.level) + 8:.1f}" y="{y_throughput(op.throughput) - 8:.1f}" fill="seagreen">operating point</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _step_tooltip(step: StepResult) -> str:
    """What a point says on hover: the step's numbers and what the client adds."""
    if step.streaming:
        ttft, itl, tpot = _stream_quantiles(step)
        return (
            f"{step.level:g}: {step.throughput:.1f} output tokens/s, "
            f"{step.requests_per_second:.1f} req/s, TTFT p95 {ttft['p95'] * 1e3:.2f} ms, "
            f"ITL p95 {itl['p95'] * 1e3:.2f} ms, TPOT p50 {tpot['p50'] * 1e3:.2f} ms"
        )
    text = (
        f"{step.level:g}: {step.inferences_per_second:.1f} infer/s, p95 {step.p95 * 1e3:.2f} ms, "
        f"mean {step.latency['avg'] * 1e3:.2f} ms"
    )
    residual, share = client_network_seconds(step), client_network_share(step)
    if step.server is not None and residual is not None:
        text += f" = server {step.server.request_seconds * 1e3:.2f} ms + client+net {residual * 1e3:.2f} ms"
        text += "" if share is None else f" ({share:.0%})"
    return text


def write_plot(result: SweepResult, path: Path) -> None:
    """Writes the plot as SVG, or as PNG through matplotlib (``pip install matplotlib``).

    Raises:
        ValueError: for another suffix, or PNG without matplotlib.
    """
    if path.suffix == ".svg":
        path.write_text(render_svg(result), encoding="utf-8")
        return
    if path.suffix != ".png":
        raise ValueError(f"--plot must end in .svg or .png, got: {path.name!r}")
    try:
        import matplotlib  # noqa: PLC0415 - optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ValueError(
            "a PNG plot needs matplotlib (pip install matplotlib); .svg works without"
        ) from None
    _png(result, path, plt)


def _png(result: SweepResult, path: Path, plt: Any) -> None:
    steps: list[StepResult] = [s for s in result.steps if s.requests]
    figure, throughput_axis = plt.subplots(figsize=(7.2, 4.2))
    latency_axis = throughput_axis.twinx()
    levels = [s.level for s in steps]
    throughput_axis.plot(levels, [s.throughput for s in steps], "o-", color="steelblue")
    series = _latency_series(result, steps)
    for (name, values), colour in zip(series, LATENCY_COLOURS, strict=False):
        latency_axis.plot(levels, [v * 1e3 for v in values], "s-", color=colour, label=name)
    if result.settings.budget_p95:
        latency_axis.axhline(result.settings.budget_p95 * 1e3, color="firebrick", linestyle="--")
    if result.knee:
        throughput_axis.plot(
            [result.knee.concurrency],
            [result.knee.throughput],
            "ko",
            fillstyle="none",
            markersize=12,
        )
    if result.operating_point:
        op = result.operating_point
        throughput_axis.plot([op.level], [op.throughput], "s", color="seagreen", markersize=10)
    throughput_axis.set_xscale("log", base=2) if len(levels) > 2 and max(levels) / min(
        levels
    ) >= 8 else None
    throughput_axis.set_xlabel(
        "request rate (/s)" if result.settings.mode == "rate" else "concurrency"
    )
    names = " and ".join(name for name, _ in series)
    throughput_axis.set_ylabel(_throughput_label(result), color="steelblue")
    latency_axis.set_ylabel(f"{names} (ms)", color="firebrick")
    if len(series) > 1:
        latency_axis.legend(loc="upper left")
    throughput_axis.set_title(f"{result.settings.model}: throughput and {names}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
