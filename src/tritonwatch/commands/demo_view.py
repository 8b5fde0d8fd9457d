"""The demo's live terminal view: what the status page shows, as a table that redraws
and fits the terminal (numbers in the row, long text under it when narrow)."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.text import Text

from tritonwatch.common.terminal_table import Column, render_table
from tritonwatch.export.status_page import ModelStatus, StatusSnapshot, ago

_SHORT = {
    "queue": "queue",
    "compute_input": "in",
    "compute_infer": "infer",
    "compute_output": "out",
    "server_other": "other",
}
"""The server's stages; ``network_client`` has its own column (client+net), as measured."""


ERROR_CHARACTERS = 120
"""The last error's text is cut here: the log line has it whole."""


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.1f}"


def _stream_p95(model: ModelStatus) -> str:
    """``41.2/8.13``: the streaming canary's TTFT and ITL p95 over 5 minutes (ITL with
    two decimals, as the status page: a decode step is a few ms); ``–`` for a model not
    streamed, and for a measure without a sample yet."""
    if model.stream is None:
        return "–"
    ttft = model.stream.quantiles.get("ttft", {}).get("p95")
    itl = model.stream.quantiles.get("itl", {}).get("p95")
    return f"{_ms(ttft)}/{'–' if itl is None else f'{itl * 1e3:.2f}'}"


def _client_network(model: ModelStatus) -> str:
    """``0.5 12%``: what the client and network add to Triton's mean over the last scrape
    window, and its share of the end-to-end mean; ``–`` before Triton's statistics."""
    share = model.client_share
    residual = share.client_network_seconds if share is not None else None
    if share is None or residual is None or share.streamed:  # a stream's time is the model's
        return "–"
    ratio = share.client_network_ratio
    return _ms(residual) + ("" if ratio is None else f" {ratio:.0%}")


def _last_error(model: ModelStatus) -> str:
    """Outcome, age and reason of the canary's last failure, cut at
    :data:`ERROR_CHARACTERS` (a server message, not a number of ours)."""
    last = model.last_error
    if last is None:
        return "–"
    text = f"{last.outcome} {ago(last.age_seconds)} ago: {last.error}"
    if len(text) > ERROR_CHARACTERS:
        text = text[: ERROR_CHARACTERS - 1] + "…"
    return text


STREAM_COLUMN = Column("TTFT/ITL p95 ms", 1)
"""Streaming models only: shown when the snapshot holds one."""
STATUS_COLUMNS = (
    Column("target/model", align="left"),
    Column("via", 5, align="left"),
    Column("p50 ms", 3),
    Column("p95 ms"),
    Column("p99 ms", 2),
    Column("budget ms"),
    Column("state", align="left"),
    Column("requests", 1),
    STREAM_COLUMN,
    Column("client+net ms", 4),
    Column("breakdown ms", align="left", note=True),
    Column("SLO burn", align="left", note=True),
    Column("recommendation", align="left", note=True),
    Column("last error", align="left", note=True),
)
"""Numbers in the row; breakdown, burn rates, advice and the last error are text that
goes under the row when the terminal is too narrow for them."""


def _state(model: ModelStatus) -> str:
    p95 = model.quantiles.get("p95")
    budget = model.budget_seconds  # None: a stream, judged by TTFT and ITL alone
    return "no data" if p95 is None else ("ok" if budget is None or p95 <= budget else "BREACH")


def _row(model: ModelStatus) -> tuple[str, ...]:
    stages = (model.breakdown or {}).items()
    breakdown = " ".join(f"{_SHORT[s]}={v * 1e3:.1f}" for s, v in stages if s in _SHORT) or "–"
    if model.steps:  # a pipeline: where its time goes is its steps, not its own stages
        breakdown = model.steps
    if model.bottleneck:
        breakdown += f" [{model.bottleneck}]"
    burns = ", ".join(
        f"{slo.name} {max(slo.burn_rates.values(), default=0.0):.1f}×" for slo in model.slos
    )
    advice = "; ".join(
        f"{r.action} {r.parameter} {r.current}→{r.proposed}" for r in model.recommendations
    )
    return (
        f"{model.target}/{model.model}",
        model.protocol,
        _ms(model.quantiles.get("p50")),
        _ms(model.quantiles.get("p95")),
        _ms(model.quantiles.get("p99")),
        _ms(model.budget_seconds),
        _state(model),
        str(sum(model.outcomes.values())),
        _stream_p95(model),
        _client_network(model),
        breakdown,
        burns or "–",
        advice or "–",
        _last_error(model),
    )


def status_lines(snapshot: StatusSnapshot, width: int | None = None) -> list[str]:
    """One row per model: quantiles against the budget, its state, requests, a
    streaming model's TTFT/ITL p95 and what the client and network add; under it (or in
    it, when wide enough) Triton's breakdown, SLO burn rates, advice and the canary's
    last error (why it fails). Without a streaming model the TTFT/ITL column is left out,
    so its room goes to the other columns."""
    rows = [_row(model) for model in snapshot.models]
    columns: tuple[Column, ...] = STATUS_COLUMNS
    if all(model.stream is None for model in snapshot.models):
        keep = [i for i, column in enumerate(columns) if column is not STREAM_COLUMN]
        columns = tuple(columns[i] for i in keep)
        rows = [tuple(row[i] for i in keep) for row in rows]
    return render_table(columns, rows, width, title="tritonwatch — per model")


class _StatusView:
    """Lays the table out at the width rich gives it, each time it draws, so the live
    view follows the terminal when it is resized."""

    def __init__(self, snapshot: StatusSnapshot) -> None:
        self._snapshot = snapshot

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = Text("\n".join(status_lines(self._snapshot, options.max_width)), no_wrap=True)
        text.highlight_regex(r"\bBREACH\b", "bold red")
        text.highlight_regex(r"(?<=  )ok\b", "green")
        text.highlight_regex(r"last error: .*", "red")
        yield text


def demo_screen(snapshot: StatusSnapshot, exporter_url: str) -> Group:
    """The table plus where to look next."""
    links = Text(
        f"metrics {exporter_url}/metrics · status page {exporter_url}/ · health "
        f"{exporter_url}/health · Ctrl-C to stop",
        style="dim",
    )
    return Group(_StatusView(snapshot), links)
