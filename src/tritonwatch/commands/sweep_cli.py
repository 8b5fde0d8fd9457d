"""``tritonwatch sweep``: perf_analyzer's concurrency sweep, with the knee and the
operating point computed, a progress bar while measuring and, at the end, a table that
fits the terminal (``export/sweep_report.to_text``).

A decoupled model (its config read before the sweep) or ``--protocol openai`` is swept
by :class:`~tritonwatch.sweep.stream_sweep.StreamSweepRunner` instead: streams on the
streaming canary's transports, judged on ``--measure ttft|itl`` and output tokens/s."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.commands.production_guard import add_production_flags, production_refusal
from tritonwatch.common.cli_flags import add_flag
from tritonwatch.common.tls_flags import add_tls_flags, tls_from, tls_problem
from tritonwatch.config.canary_schema import (
    DEFAULT_STRING_LENGTH,
    MAX_STRING_LENGTH,
    InputOverride,
    StreamConfig,
)
from tritonwatch.config.units import parse_duration
from tritonwatch.export.sweep_report import (
    judged_on,
    throughput_unit,
    to_csv,
    to_json,
    to_text,
    write_plot,
)
from tritonwatch.kserve.payload import PayloadError
from tritonwatch.records.sweep_records import (
    MEASURE_NAMES,
    SweepProtocol,
    SweepResult,
    SweepSettings,
)
from tritonwatch.sweep.load_sweep import SweepRunner
from tritonwatch.sweep.stream_sweep import StreamSweepRunner, is_streaming
from tritonwatch.triton_api.answer import ApiError

EXIT_USAGE = 2
EXIT_SERVER = 1
"""The server could not be asked for the model (unreachable, or it refused): no sweep."""


def parse_levels(text: str, *, integers: bool) -> tuple[float, ...]:
    """``1,2,4,8`` (a list), ``1:64`` (doubling from 1 up to 64), ``10:100:10`` (linear).

    Raises:
        argparse.ArgumentTypeError: naming the accepted forms.
    """
    kind = int if integers else float
    try:
        if ":" in text:
            parts = [kind(p) for p in text.split(":")]
            if len(parts) == 2:
                start, end = parts
                levels, level = [], start
                while level <= end:
                    levels.append(level)
                    level = level * 2
                if levels[-1] != end:
                    levels.append(end)
            elif len(parts) == 3:
                start, end, step = parts
                count = int((end - start) / step) + 1
                levels = [start + i * step for i in range(count)]
            else:
                raise ValueError
        else:
            levels = [kind(p) for p in text.split(",")]
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(
            f"must be a list (1,2,4), a doubling range (1:64) or start:end:step, got: {text!r}"
        ) from None
    if not levels or min(levels) <= 0:
        raise argparse.ArgumentTypeError(f"levels must be positive, got: {text!r}")
    return tuple(float(level) for level in levels)


def seconds_flag(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def string_length_flag(text: str) -> int:
    """``--string-length``: the same range as ``canary.string_length``."""
    try:
        length = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got: {text!r}") from None
    if not 1 <= length <= MAX_STRING_LENGTH:
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {MAX_STRING_LENGTH}, got: {text!r}"
        )
    return length


def string_data_flag(text: str) -> str:
    """``--string-data``: refused when empty (an empty ``TRITONWATCH_STRING_DATA`` is
    more likely a manifest slip than a wish to send empty strings)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty (leave it out for random strings)")
    return text


def add_string_flags(parser: argparse.ArgumentParser) -> None:
    """perf_analyzer's flags for BYTES inputs, shared by ``sweep`` and ``tune``."""
    add_flag(
        parser,
        "--string-length",
        type=string_length_flag,
        default=DEFAULT_STRING_LENGTH,
        metavar="N",
        help=f"BYTES inputs: characters of each random string (default {DEFAULT_STRING_LENGTH})",
    )
    add_flag(
        parser,
        "--string-data",
        type=string_data_flag,
        default=None,
        metavar="S",
        help="BYTES inputs: send S in every element instead of random strings",
    )


def positive_int_flag(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got: {text!r}")
    return value


def add_stream_flags(parser: argparse.ArgumentParser) -> None:
    """What a streaming sweep sends and judges (a decoupled model, ``--protocol openai``)."""
    add_flag(
        parser,
        "--measure",
        choices=["ttft", "itl"],
        default=None,
        help="streaming: judge stability, budget and operating point on time to first "
        "token or inter-token latency (default ttft)",
    )
    add_flag(
        parser,
        "--max-tokens",
        type=positive_int_flag,
        default=64,
        metavar="N",
        help="streaming: tokens asked for per request (default 64)",
    )
    add_flag(
        parser,
        "--prompt-words",
        type=positive_int_flag,
        default=32,
        metavar="N",
        help="streaming: random words per prompt (default 32)",
    )
    add_flag(
        parser,
        "--openai-api",
        choices=["chat", "completions"],
        default="chat",
        help="--protocol openai: /v1/chat/completions or /v1/completions",
    )
    add_flag(
        parser,
        "--served-name",
        default=None,
        help="--protocol openai: the request's model field, if not --model",
    )


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.partition("=")
    try:
        return name, tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be NAME=d1,d2,..., got: {text!r}") from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``sweep`` to the top-level parser."""
    sweep = subparsers.add_parser("sweep", help="measure throughput and latency by concurrency")
    add_flag(
        sweep,
        "--url",
        required=True,
        help="http://host:8000, grpc://host:8001 or an OpenAI server's URL",
    )
    add_flag(sweep, "--model", required=True, help="model name")
    add_flag(sweep, "--model-version", default="", help="model version (default: server's choice)")
    add_flag(
        sweep,
        "--protocol",
        choices=["http", "grpc", "openai"],
        default=None,
        help="default: from --url; openai: an OpenAI-compatible server",
    )
    add_flag(sweep, "--concurrency", default="1:64", help="1,2,4,8 | 1:64 (doubling) | 1:16:2")
    add_flag(sweep, "--request-rate", default=None, help="open-loop rates instead, e.g. 50:400:50")
    add_flag(
        sweep,
        "--budget-p95",
        type=seconds_flag,
        default=None,
        help="stop past this p95 (of --measure when streaming), e.g. 50ms",
    )
    add_flag(sweep, "--percentile", type=float, default=95.0, help="percentile for stability")
    add_flag(sweep, "--measurement-interval", type=seconds_flag, default=5.0, help="window length")
    add_flag(sweep, "--measurement-request-count", type=int, default=None, help="window by count")
    add_flag(sweep, "--max-windows", type=int, default=10, help="windows per step at most")
    add_flag(sweep, "--max-processes", type=int, default=None, help="load worker processes at most")
    add_flag(sweep, "--shape", type=_shape, action="append", default=[], help="INPUT=1,3,224,224")
    add_string_flags(sweep)
    add_stream_flags(sweep)
    add_flag(sweep, "--json", type=Path, default=None, help="write every number as JSON")
    add_flag(sweep, "--csv", type=Path, default=None, help="write perf_analyzer's CSV")
    add_flag(sweep, "--plot", type=Path, default=None, help="write a plot (.svg, or .png)")
    add_production_flags(sweep)
    add_tls_flags(sweep)
    sweep.set_defaults(handler=run_sweep_command)


def settings_from(args: argparse.Namespace) -> SweepSettings:
    protocol: SweepProtocol = args.protocol or ("grpc" if args.url.startswith("grpc") else "http")
    rate_mode = args.request_rate is not None
    levels = parse_levels(
        args.request_rate if rate_mode else args.concurrency, integers=not rate_mode
    )
    extra = {} if args.max_processes is None else {"max_processes": args.max_processes}
    return SweepSettings(
        url=args.url,
        model=args.model,
        version=args.model_version,
        protocol=protocol,
        levels=levels,
        mode="rate" if rate_mode else "concurrency",
        budget_p95=args.budget_p95,
        percentile=args.percentile,
        window_seconds=args.measurement_interval,
        window_requests=args.measurement_request_count,
        max_windows=args.max_windows,
        inputs={name: InputOverride(shape=dims) for name, dims in args.shape},
        string_length=args.string_length,
        string_data=args.string_data,
        tls=tls_from(args),
        stream=StreamConfig(
            max_tokens=args.max_tokens, prompt_words=args.prompt_words, openai_api=args.openai_api
        ),
        served_name=args.served_name,
        **extra,
    )


def streaming_settings(
    args: argparse.Namespace, settings: SweepSettings
) -> tuple[SweepSettings | None, str | None]:
    """The settings with the measure the sweep is judged on, or why they cannot be run.

    A streaming model (decoupled, or ``--protocol openai``) is judged on ``--measure``
    (TTFT by default); a plain one on latency, and ``--measure`` is a mistake there.
    """
    if is_streaming(settings):
        if settings.mode == "rate":
            return None, "a streaming model is swept by --concurrency, not --request-rate"
        return replace(settings, measure=args.measure or "ttft"), None
    if args.measure is not None:
        return None, (
            f"--measure {args.measure} needs a streaming model (decoupled, or --protocol openai)"
        )
    return settings, None


def run_sweep_command(args: argparse.Namespace) -> int:
    """Runs ``tritonwatch sweep``; returns its exit status (a server that cannot be asked
    for the model's metadata or config is a one-line error, ``EXIT_SERVER``)."""
    console = Console()
    try:
        return _run_sweep(args, console)
    except ApiError as error:
        console.print(f"[red]sweep: cannot ask {args.url} about {args.model}: {error}[/red]")
        return EXIT_SERVER


def _run_sweep(args: argparse.Namespace, console: Console) -> int:
    refusal = production_refusal(args) or tls_problem(args)
    if refusal is not None:
        console.print(f"[red]sweep: {refusal}[/red]")
        return EXIT_USAGE
    chosen, refusal = streaming_settings(args, settings_from(args))
    if chosen is None:
        console.print(f"[red]sweep: {refusal}[/red]")
        return EXIT_USAGE
    settings = chosen
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runner: SweepRunner | StreamSweepRunner = (
        SweepRunner(settings, stop)
        if settings.measure == "latency"
        else StreamSweepRunner(settings, stop)
    )
    # Redrawn once per window, not by rich's 10 Hz refresh thread: that thread holds
    # the GIL the in-process load worker needs, and showed up in its latency tail.
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[state]}"),
        console=console,
        transient=True,
        auto_refresh=False,
    ) as progress:
        task = progress.add_task(
            "sweep", total=len(settings.levels) * settings.max_windows, state=""
        )

        def on_window(level: float, windows: int, stable: bool) -> None:
            index = settings.levels.index(level)
            done = index * settings.max_windows + (settings.max_windows if stable else windows)
            state = "stable" if stable else f"window {windows}/{settings.max_windows}"
            progress.update(
                task, completed=done, description=f"level {level:g}", state=state, refresh=True
            )

        try:
            result = judge_sweep(runner.run(on_window))
        except PayloadError as error:
            console.print(f"[red]cannot build requests: {error}[/red]")
            return EXIT_USAGE
    console.out("\n".join(to_text(result)), highlight=False)
    for line in verdict_lines(result):
        console.print(line)
    for warning in result.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if args.json:
        args.json.write_text(json.dumps(to_json(result), indent=2), encoding="utf-8")
    if args.csv:
        args.csv.write_text(to_csv(result), encoding="utf-8")
    if args.plot:
        try:
            write_plot(result, args.plot)
        except ValueError as error:
            console.print(f"[red]sweep: {error}[/red]")
            return EXIT_USAGE
    return 0


def verdict_lines(result: SweepResult) -> list[str]:
    """The knee and (with a budget) the operating point, in the units they were judged in."""
    settings, lines = result.settings, []
    unit = throughput_unit(result)
    if result.knee:
        reached = "" if result.knee.reached else " (not reached: throughput still growing)"
        judged = "" if settings.measure == "latency" else f"; {judged_on(result)}"
        lines.append(f"knee: {result.knee.concurrency:g}{reached}{judged}")
    if settings.budget_p95 is not None:
        point = result.operating_point
        name = "p95" if settings.measure == "latency" else f"{MEASURE_NAMES[settings.measure]} p95"
        lines.append(
            f"operating point: {point.level:g} ({point.throughput:.1f} {unit}, "
            f"{name} {point.quantiles(settings.measure)['p95'] * 1e3:.2f} ms)"
            if point
            else "operating point: none within the budget"
        )
    return lines
