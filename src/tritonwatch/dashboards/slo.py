"""Dashboard (1), SLO overview: p50/p95/p99 per model against the budget line, the canary's
outcomes, error budget remaining, burn rates, and the Triton alerts Prometheus holds.

Every SLO panel is keyed by the ``slo`` label, so streaming models' TTFT and ITL SLOs show
beside latency and availability; the streaming row puts those two on their own, where a
model's first-token and token-pace budgets are easy to tell apart from its whole-request one."""

from __future__ import annotations

from tritonwatch.dashboards.panels import (
    BUDGET_LINE,
    Json,
    Query,
    Row,
    by_name,
    stat,
    state_timeline,
    table,
    thresholds,
    timeseries,
    value_map,
)
from tritonwatch.dashboards.variables import (
    budget_variable,
    dashboard,
    model_variable,
    sel,
    target_variable,
    window_variable,
)

UID = "tritonwatch-slo"
TITLE = "tritonwatch / SLO overview"

QUANTILES = "tritonwatch_latency_quantile_seconds"
REQUESTS = "tritonwatch_canary_requests_total"
EVENTS = "tritonwatch_slo_events_total"
GOOD_EVENTS = "tritonwatch_slo_good_events_total"
BURN_RATE = "tritonwatch:slo_burn_rate:ratio"
"""The shipped recording rules' burn rate per SLO and window (``window`` label)."""
BUDGET = Query("vector($budget)", "budget")
BURN_FACTORS = thresholds((None, "green"), (1, "yellow"), (6, "orange"), (14.4, "red"))
"""The SRE Workbook burn-rate factors the alerts use (docs/design.md §6), drawn as dashed lines."""


def canary_quantile(quantile: str) -> str:
    """The canary's window quantile series, e.g. ``canary_quantile("0.95")``."""
    return QUANTILES + sel(f'quantile="{quantile}"', 'window="$window"', 'source="canary"')


def quantile_query(quantile: str, name: str) -> Query:
    return Query(canary_quantile(quantile), "{{target}}/{{model}} " + name)


def _now_row() -> Row:
    p95 = f"max by (target, model) ({canary_quantile('0.95')})"
    success = sel('outcome="success"')
    ok = f"sum by (target, model) (increase({REQUESTS}{success}[$__range]))"
    every = f"sum by (target, model) (increase({REQUESTS}{sel()}[$__range]))"
    return Row(
        "Now",
        (
            stat(
                "Targets up",
                "Whether each Triton server answered its readiness check (tritonwatch_up).",
                Query('tritonwatch_up{target=~"$target"}', "{{target}}"),
                unit="none",
                steps=thresholds((None, "red"), (1, "green")),
                mappings=[value_map("1", "UP", "green"), value_map("0", "DOWN", "red")],
            ),
            stat(
                "Canary p95 / budget",
                "The canary's end-to-end p95 over the quantile window as a share of the "
                "budget variable: above 100 % the model is over its latency budget.",
                Query(f"{p95} / $budget", "{{target}}/{{model}}"),
                unit="percentunit",
                steps=thresholds((None, "green"), (0.8, "orange"), (1, "red")),
            ),
            stat(
                "Canary success ratio (time range)",
                "Successful canary requests over all canary requests in the dashboard's "
                "time range (the availability SLI).",
                Query(f"{ok} / {every}", "{{target}}/{{model}}"),
                unit="percentunit",
                decimals=3,
                steps=thresholds((None, "red"), (0.99, "orange"), (0.999, "green")),
            ),
            stat(
                "Error budget remaining",
                "Share of the SLO period's error budget still unspent, per model and SLO "
                "(tritonwatch_slo_error_budget_remaining_ratio), by the source of the events: "
                "canary requests or all of Triton's traffic. Below 0 it is overspent.",
                Query(
                    f"tritonwatch_slo_error_budget_remaining_ratio{sel()}",
                    "{{model}} {{slo}} ({{source}})",
                ),
                unit="percentunit",
                steps=thresholds((None, "red"), (0.25, "orange"), (0.5, "green")),
            ),
        ),
    )


def sli_rate(counter: str, slo: str) -> str:
    """Events of the ``slo`` SLI per second per model, from the daemon's SLI counter."""
    matcher = f'slo="{slo}"'
    return f"sum by (target, model) (rate({counter}{sel(matcher)}[$__rate_interval]))"


def _latency_row() -> Row:
    within = f"{sli_rate(GOOD_EVENTS, 'latency')}\n/\n({sli_rate(EVENTS, 'latency')} > 0)"
    return Row(
        "Latency against the budget",
        (
            timeseries(
                "p50, p95, p99 per model (canary, end to end)",
                "Latency quantiles of the canary's requests, measured by the client from the "
                "intended send time, over the quantile window; the dashed red line is the "
                "budget variable.",
                quantile_query("0.5", "p50"),
                quantile_query("0.95", "p95"),
                quantile_query("0.99", "p99"),
                BUDGET,
                unit="s",
                width=24,
                height=9,
                overrides=[by_name("budget", **BUDGET_LINE)],
            ),
            timeseries(
                "Canary requests by outcome",
                "Canary requests per second by how they ended: success, timeout, "
                "http_error, grpc_error, connection_error, bad_response.",
                Query(
                    f"sum by (target, model, outcome) (rate({REQUESTS}{sel()}[$__rate_interval]))",
                    "{{model}} {{outcome}}",
                ),
                unit="reqps",
                stacked=True,
            ),
            timeseries(
                "Canary requests within the latency threshold",
                "The latency SLI: the share of canary requests that answered within the "
                "SLO's threshold (tritonwatch_slo_good_events_total over "
                "tritonwatch_slo_events_total, slo=latency); unlike the window quantiles it "
                "adds up correctly across several daemons (a DaemonSet).",
                Query(within, "{{target}}/{{model}}"),
                unit="percentunit",
                maximum=1,
            ),
        ),
    )


def _budget_row() -> Row:
    return Row(
        "Error budget and burn rate",
        (
            timeseries(
                "Burn rate by window",
                "How fast each SLO spends its error budget (1 = exactly over the SLO period), "
                "from the canary's SLI counters through the shipped recording rules "
                "(tritonwatch:slo_burn_rate:ratio). "
                "The alerts page at 14.4× (1h and 5m) or 6× (6h and 30m) and ticket at 3× "
                "(1d and 2h) or 1× (3d and 6h).",
                Query(f"{BURN_RATE}{sel()}", "{{model}} {{slo}} {{window}}"),
                unit="suffix:×",
                width=10,
                threshold_lines=BURN_FACTORS,
            ),
            timeseries(
                "Error budget remaining",
                "Share of the error budget left over the SLO period; negative when overspent.",
                Query(
                    f"tritonwatch_slo_error_budget_remaining_ratio{sel()}",
                    "{{model}} {{slo}} ({{source}})",
                ),
                unit="percentunit",
                width=9,
                minimum=None,
                maximum=1,
            ),
            stat(
                "SLO objectives",
                "The objective of each SLO (tritonwatch_slo_objective_ratio).",
                Query(f"tritonwatch_slo_objective_ratio{sel()}", "{{model}} {{slo}}"),
                unit="percentunit",
                width=5,
                height=8,
                decimals=2,
                steps=thresholds((None, "blue")),
            ),
        ),
    )


STREAMING = 'slo=~"ttft|itl"'
"""The streaming SLOs (docs/design.md §6): time to first token and inter-token latency."""
PAGE_WINDOWS = 'window=~"1h|5m"'
"""The fast page's windows: where a TTFT or ITL burn shows first."""


def _streaming_row() -> Row:
    return Row(
        "Streaming SLOs: time to first token (TTFT) and inter-token latency (ITL)",
        (
            timeseries(
                "TTFT and ITL burn rate (1h and 5m)",
                "Burn rate of the TTFT SLO (one event per successful stream: good when the "
                "first token came within the threshold) and of the ITL SLO (one event per gap "
                "between tokens), over the page's windows. On by default for streamed models; "
                "empty for the others unless slo.ttft / slo.itl is set.",
                Query(
                    BURN_RATE + sel(STREAMING, PAGE_WINDOWS),
                    "{{model}} {{slo}} {{window}}",
                ),
                unit="suffix:×",
                width=16,
                threshold_lines=BURN_FACTORS,
            ),
            stat(
                "TTFT and ITL error budget remaining",
                "Share of the period's TTFT and ITL error budgets still unspent; below 0 "
                "the budget is overspent.",
                Query(
                    f"tritonwatch_slo_error_budget_remaining_ratio{sel(STREAMING)}",
                    "{{model}} {{slo}}",
                ),
                unit="percentunit",
                width=8,
                height=8,
                steps=thresholds((None, "red"), (0.25, "orange"), (0.5, "green")),
            ),
        ),
    )


ALERTS = 'ALERTS{alertname=~"Triton.*"}'


def _alerts_row() -> Row:
    hide: Json = {"Time": True, "Value": True, "__name__": True}
    return Row(
        "Alerts",
        (
            table(
                "Active alerts",
                "Triton alerts Prometheus is evaluating now (pending or firing), from the "
                "generated rules; Alertmanager routes and silences them.",
                Query(ALERTS, instant=True, table=True),
                height=7,
                transformations=[{"id": "organize", "options": {"excludeByName": hide}}],
            ),
            state_timeline(
                "Alert history",
                "When each Triton alert was firing.",
                Query(
                    "max by (alertname, severity, target, model, slo) "
                    '(ALERTS{alertname=~"Triton.*",alertstate="firing"})',
                    "{{alertname}} {{severity}} {{target}}/{{model}} {{slo}}",
                ),
                mappings=[value_map("1", "firing", "red")],
            ),
        ),
    )


def build() -> Json:
    """The SLO overview dashboard."""
    return dashboard(
        UID,
        TITLE,
        "Per-model latency against the budget, availability, error budget and burn rates "
        "of the tritonwatch SLOs (TTFT and ITL for streaming models), and the Triton alerts.",
        [target_variable(), model_variable(), budget_variable(), window_variable()],
        [_now_row(), _latency_row(), _budget_row(), _streaming_row(), _alerts_row()],
    )
