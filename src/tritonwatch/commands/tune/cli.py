"""``tritonwatch tune --url URL --model M --budget-p95 50ms [--apply] [--max-steps N]``."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from tritonwatch.commands.production_guard import add_production_flags, production_refusal
from tritonwatch.commands.sweep_cli import add_string_flags, parse_levels, seconds_flag
from tritonwatch.commands.tune.repository import NotExplicitModeError, TuneError, changed, to_pbtxt
from tritonwatch.commands.tune.tuner import TuneInterruptedError, Tuner, TuneResult
from tritonwatch.common.cli_flags import add_flag
from tritonwatch.common.logs import configure_logging
from tritonwatch.common.terminal_table import Column, render_table
from tritonwatch.common.tls_flags import add_tls_flags, tls_from, tls_problem
from tritonwatch.kserve.payload import PayloadError
from tritonwatch.records.sweep_records import SweepSettings

EXIT_REFUSED = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tune = subparsers.add_parser("tune", help="change one parameter at a time, keep what helps")
    add_flag(tune, "--url", required=True, help="http://host:8000 or grpc://host:8001")
    add_flag(tune, "--model", required=True, help="model name")
    add_flag(
        tune, "--budget-p95", type=seconds_flag, required=True, help="the latency budget, e.g. 50ms"
    )
    add_flag(tune, "--apply", action="store_true", help="change the server (default: plan only)")
    add_flag(tune, "--max-steps", type=int, default=6, help="changes to try at most")
    add_flag(tune, "--concurrency", default="1:16", help="sweep levels: 1,2,4 | 1:16 | 1:16:2")
    add_flag(tune, "--measurement-interval", type=seconds_flag, default=2.0, help="window length")
    add_flag(tune, "--max-windows", type=int, default=10, help="windows per step at most")
    add_flag(
        tune,
        "--metrics-url",
        default=None,
        help="Triton's /metrics for GPU use (default: --url host, port 8002)",
    )
    add_flag(tune, "--json", type=Path, default=None, help="write the history and configs as JSON")
    add_string_flags(tune)
    add_production_flags(tune)
    add_tls_flags(tune)
    tune.set_defaults(handler=run_tune_command)


def _default_metrics_url(url: str) -> str:
    """Triton's metrics port on the same host as ``url``."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if parts.scheme in ("https", "grpcs") else "http"
    return f"{scheme}://{host}:8002/metrics"


HISTORY_COLUMNS = (
    Column("step"),
    Column("infer/s in budget"),
    Column("p95 ms"),
    Column("verdict", align="left"),
    Column("change", align="left", note=True),
    Column("why", align="left", note=True),
)
"""The change and the reason are long text: under their row on a narrow terminal."""


def history_lines(result: TuneResult, width: int | None = None) -> list[str]:
    """The tuning history as lines that fit ``width`` (default: the terminal's)."""
    rows = []
    for step in result.history:
        change = (
            f"{step.change.parameter}: {step.change.current!r} → {step.change.proposed!r}"
            if step.change
            else "(baseline)"
        )
        throughput = f"{step.throughput:.1f}" if step.throughput is not None else "none"
        p95 = f"{step.p95 * 1e3:.2f}" if step.p95 is not None else "-"
        rows.append((str(step.step), throughput, p95, step.verdict, change, step.reason))
    return render_table(HISTORY_COLUMNS, rows, width, title="tuning history")


def _diff(result: TuneResult) -> dict[str, dict[str, Any]]:
    return {
        field: {"before": before, "after": after}
        for field, (before, after) in changed(result.original, result.final).items()
    }


def _json(result: TuneResult) -> dict[str, Any]:
    return {
        "original_config": result.original,
        "final_config": result.final,
        "diff": _diff(result),
        "history": [
            {
                "step": s.step,
                "parameter": s.change.parameter if s.change else None,
                "current": s.change.current if s.change else None,
                "proposed": s.change.proposed if s.change else None,
                "throughput_in_budget": s.throughput,
                "p95_seconds": s.p95,
                "verdict": s.verdict,
                "reason": s.reason,
            }
            for s in result.history
        ],
        "plan": None
        if result.plan is None
        else {
            "parameter": result.plan.parameter,
            "current": result.plan.current,
            "proposed": result.plan.proposed,
            "reason": result.plan.reason,
        },
        "interrupted": result.interrupted,
    }


def sweep_settings_from(args: argparse.Namespace) -> SweepSettings:
    """The sweep each tuning step runs, from ``tune``'s flags."""
    protocol: Literal["http", "grpc"] = "grpc" if args.url.startswith("grpc") else "http"
    return SweepSettings(
        url=args.url,
        model=args.model,
        protocol=protocol,
        levels=parse_levels(args.concurrency, integers=True),
        budget_p95=args.budget_p95,
        window_seconds=args.measurement_interval,
        max_windows=args.max_windows,
        string_length=args.string_length,
        string_data=args.string_data,
        tls=tls_from(args),
    )


def run_tune_command(args: argparse.Namespace) -> int:
    console = Console()
    refusal = production_refusal(args) or tls_problem(args)
    if refusal is not None:
        console.print(f"[red]tune: {refusal}[/red]")
        return EXIT_REFUSED
    # The tuner's info events (tune_step) repeat the history table as one long log line
    # that no terminal width holds; warnings and errors still print.
    configure_logging("auto", "warning")
    settings = sweep_settings_from(args)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    metrics_url = args.metrics_url or _default_metrics_url(args.url)
    tuner = Tuner(
        settings,
        apply=args.apply,
        max_steps=args.max_steps,
        stop=stop,
        report=lambda line: console.print(line, highlight=False),
        metrics_url=metrics_url,
    )
    try:
        result = tuner.run()
    except NotExplicitModeError as error:
        console.print(f"[red]tune: {error}[/red]")
        return EXIT_REFUSED
    except PayloadError as error:
        console.print(f"[red]tune: cannot build requests: {error}[/red]")
        return EXIT_REFUSED
    except TuneInterruptedError:
        console.print("[yellow]tune: interrupted; the last kept config is in place[/yellow]")
        return EXIT_INTERRUPTED
    except TuneError as error:
        console.print(f"[red]tune: {error}; the last kept config is in place[/red]")
        return EXIT_FAILED
    console.out("\n".join(history_lines(result)), highlight=False)
    if not args.apply:
        plan = result.plan
        console.print(
            f"plan (nothing changed; add --apply): {plan.parameter} {plan.current!r} → "
            f"{plan.proposed!r} because {plan.reason}"
            if plan
            else "plan: no change to try"
        )
    diff = changed(result.original, result.final)
    console.print("final config diff (JSON):")
    console.print_json(json.dumps({k: {"before": b, "after": a} for k, (b, a) in diff.items()}))
    console.print("final config diff (config.pbtxt):")
    console.print(
        to_pbtxt(result.final, list(diff)) or "(no change)", highlight=False, markup=False
    )
    if args.json:
        args.json.write_text(json.dumps(_json(result), indent=2), encoding="utf-8")
    return 0
