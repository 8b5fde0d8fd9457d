"""The demo's live terminal view: what the status page shows, as a table that redraws."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

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


def _client_network(model: ModelStatus) -> str:
    """``0.5 12%``: what the client and network add to Triton's mean over the last scrape
    window, and its share of the end-to-end mean; ``–`` before Triton's statistics."""
    share = model.client_share
    residual = share.client_network_seconds if share is not None else None
    if share is None or residual is None:
        return "–"
    ratio = share.client_network_ratio
    return _ms(residual) + ("" if ratio is None else f" {ratio:.0%}")


def _last_error(model: ModelStatus) -> Text:
    """Outcome, age and reason of the canary's last failure; plain Text, as error
    messages hold brackets (``[500]``, ``[StatusCode.INTERNAL]``) rich would take for markup."""
    last = model.last_error
    if last is None:
        return Text("–", style="dim")
    text = f"{last.outcome} {ago(last.age_seconds)} ago: {last.error}"
    if len(text) > ERROR_CHARACTERS:
        text = text[: ERROR_CHARACTERS - 1] + "…"
    return Text(text, style="red" if last.age_seconds < 60 else "yellow")


def status_table(snapshot: StatusSnapshot) -> Table:
    """One row per model: quantiles against the budget, Triton's breakdown, what the
    client and network add to it, SLOs, advice, and the canary's last error (why it
    fails, when it does)."""
    table = Table(title="tritonwatch — per model", expand=True)
    for column in ("target/model", "p50 ms", "p95 ms", "p99 ms", "budget ms", "state",
                   "requests", "breakdown (ms)", "client+net ms", "SLO burn", "recommendation",
                   "last error"):  # fmt: skip
        table.add_column(column)
    for model in snapshot.models:
        p95 = model.quantiles.get("p95")
        state = "no data" if p95 is None else ("ok" if p95 <= model.budget_seconds else "BREACH")
        style = {"ok": "green", "BREACH": "bold red"}.get(state, "dim")
        stages = (model.breakdown or {}).items()
        breakdown = " ".join(f"{_SHORT[s]}={v * 1e3:.1f}" for s, v in stages if s in _SHORT) or "–"
        if model.bottleneck:
            breakdown += escape(f" [{model.bottleneck}]")  # brackets are rich markup otherwise
        burns = (
            ", ".join(
                f"{slo.name} {max(slo.burn_rates.values(), default=0.0):.1f}×" for slo in model.slos
            )
            or "–"
        )
        advice = (
            "; ".join(
                f"{r.action} {r.parameter} {r.current}→{r.proposed}" for r in model.recommendations
            )
            or "–"
        )
        table.add_row(
            f"{model.target}/{model.model}", _ms(model.quantiles.get("p50")), _ms(p95),
            _ms(model.quantiles.get("p99")), _ms(model.budget_seconds), Text(state, style=style),
            str(sum(model.outcomes.values())), breakdown, _client_network(model), burns, advice,
            _last_error(model),
        )  # fmt: skip
    return table


def demo_screen(snapshot: StatusSnapshot, exporter_url: str) -> Group:
    """The table plus where to look next."""
    links = Text(
        f"metrics {exporter_url}/metrics · status page {exporter_url}/ · health "
        f"{exporter_url}/health · Ctrl-C to stop",
        style="dim",
    )
    return Group(status_table(snapshot), links)
