"""Dashboard (2), latency breakdown: where a request's time goes inside Triton (stacked
stages), the client's view against the server's, the load that explains it:
throughput, batch size, pending requests, failures; and for generative models what the
streaming canary sees (time to first token, inter-token latency, output tokens/s)."""

from __future__ import annotations

from tritonwatch.dashboards.panels import (
    BUDGET_LINE,
    Json,
    Panel,
    Query,
    Row,
    by_name,
    timeseries,
)
from tritonwatch.dashboards.slo import (
    BUDGET,
    EVENTS,
    GOOD_EVENTS,
    QUANTILES,
    canary_quantile,
    sli_rate,
)
from tritonwatch.dashboards.variables import (
    budget_variable,
    dashboard,
    model_variable,
    sel,
    target_variable,
    window_variable,
)

UID = "tritonwatch-latency"
TITLE = "tritonwatch / latency breakdown"

BREAKDOWN = "tritonwatch_model_latency_breakdown_seconds"
STREAM_QUANTILES = "tritonwatch_canary_stream_quantile_seconds"
OUTPUT_TOKENS = "tritonwatch_canary_output_tokens_total"


def _breakdown_row() -> Row:
    share = (
        f"{BREAKDOWN}{sel()} / ignoring (stage) group_left sum without (stage) ({BREAKDOWN}{sel()})"
    )
    server = QUANTILES + sel('quantile="0.95"', 'source="server"')  # Triton's window: 1m
    client_vs_server = f"{canary_quantile('0.95')}\nor\n{server}"
    return Row(
        "Where the time goes",
        (
            timeseries(
                "Mean time per request by stage",
                "Triton's queue, compute input/infer/output and other server time, plus the "
                "network and client time the canary sees on top (network_client), stacked: "
                "the top of the stack is the mean end-to-end latency.",
                Query(f"{BREAKDOWN}{sel()}", "{{model}} {{stage}}"),
                unit="s",
                width=16,
                height=9,
                stacked=True,
            ),
            timeseries(
                "Share of each stage",
                "Each stage's share of the mean request time: the dominant stage names the "
                "bottleneck (queue: batching delay or too few instances; compute_infer: the "
                "model itself; compute_input/output: I/O; network_client: the network).",
                Query(share, "{{model}} {{stage}}"),
                unit="percentunit",
                width=8,
                height=9,
                stacked=True,
                maximum=1,
            ),
            timeseries(
                "p95: client end to end vs server",
                "p95 seen by the canary (source=canary, end to end) and by Triton itself "
                "(source=server, from its summaries when --metrics-config "
                "summary_latencies=true); a wide gap is network and serialisation time.",
                Query(client_vs_server, "{{model}} p95 {{source}}"),
                BUDGET,
                unit="s",
                overrides=[by_name("budget", **BUDGET_LINE)],
            ),
            timeseries(
                "Canary requests over the latency threshold",
                "Canary requests per second that answered slower than the latency SLO's "
                "threshold (the SLI's bad events: tritonwatch_slo_events_total minus "
                "tritonwatch_slo_good_events_total, slo=latency; timeouts count).",
                Query(
                    f"{sli_rate(EVENTS, 'latency')}\n-\n{sli_rate(GOOD_EVENTS, 'latency')}",
                    "{{target}}/{{model}}",
                ),
                unit="reqps",
                stacked=True,
            ),
        ),
    )


def _load_row() -> Row:
    return Row(
        "Load",
        (
            timeseries(
                "Throughput",
                "Inferences per second (a request of batch N counts N) and requests per "
                "second Triton completed, from its counters over the last scrape interval.",
                Query(
                    f"tritonwatch_model_throughput_inferences_per_second{sel()}",
                    "{{model}} inferences/s",
                ),
                Query(f"tritonwatch_model_requests_per_second{sel()}", "{{model}} requests/s"),
                unit="short",
                width=8,
            ),
            timeseries(
                "Average batch size",
                "Inferences per model execution: well below max_batch_size under load "
                "means the dynamic batcher has room (a longer queue delay fills batches).",
                Query(f"tritonwatch_model_batch_size_average{sel()}", "{{model}}"),
                unit="short",
                width=8,
            ),
            timeseries(
                "Pending requests",
                "Requests waiting in Triton's queues at each scrape (Triton 23.09+): "
                "a queue that never drains means the model needs more capacity.",
                Query(f"tritonwatch_model_pending_requests{sel()}", "{{model}}"),
                unit="short",
                width=8,
            ),
            timeseries(
                "Failures by reason",
                "Failed requests per second by Triton's reason: REJECTED (queue full or "
                "timed out), CANCELED, BACKEND, OTHER.",
                Query(
                    f"tritonwatch_model_failures_per_second{sel()}",
                    "{{model}} {{reason}}",
                ),
                unit="reqps",
                width=24,
                height=7,
                stacked=True,
            ),
        ),
    )


def _stream_quantiles(measure: str, title: str, description: str) -> Panel:
    selector = sel(f'measure="{measure}"', 'window="$window"')
    return timeseries(
        title,
        description,
        Query(f"{STREAM_QUANTILES}{selector}", "{{model}} {{protocol}} p{{quantile}}"),
        unit="s",
        width=8,
    )


def _stream_row() -> Row:
    """Only streaming canaries (decoupled models, OpenAI servers) write these series:
    for other models the row stays empty."""
    return Row(
        "Streaming (generative models)",
        (
            _stream_quantiles(
                "ttft",
                "Time to first token",
                "Streaming canary: from the request's origin to the first response that "
                "carries output (docs/design.md §5), quantiles over $window; long prefills "
                "and a waiting queue show here first.",
            ),
            _stream_quantiles(
                "itl",
                "Inter-token latency",
                "Streaming canary: every gap between consecutive responses that carry "
                "output (vLLM's itl), quantiles over $window; the decode step's pace, "
                "which grows with the sequences running at once.",
            ),
            timeseries(
                "Output tokens per second",
                "Tokens the streaming canary received per second (the server's count when "
                "it reports one): the canary's own traffic, not the model's throughput.",
                Query(
                    f"sum by (target, model, protocol) (rate({OUTPUT_TOKENS}{sel()}"
                    "[$__rate_interval]))",
                    "{{model}} {{protocol}}",
                ),
                unit="short",
                width=8,
            ),
        ),
    )


def build() -> Json:
    """The latency breakdown dashboard."""
    return dashboard(
        UID,
        TITLE,
        "Where each model's latency goes (queue, compute, network), against the load "
        "that explains it: throughput, batch size, pending requests and failures; for "
        "generative models time to first token, inter-token latency and tokens/s.",
        [target_variable(), model_variable(), budget_variable(), window_variable()],
        [_breakdown_row(), _load_row(), _stream_row()],
    )
