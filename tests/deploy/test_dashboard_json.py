"""The committed Grafana dashboards: generated from code and in sync with it, well formed,
templated on datasource/target/model, and reading only metrics tritonwatch exports —
checked against the /metrics of a real daemon watching the simulator, as is the
hand-kept contract itself."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml
from promql_names import GRAFANA_BUILTINS, metric_names, substitute, variables

from support import REPO, DaemonProcess, wait_until
from tritonwatch.dashboards import DASHBOARDS, expressions, render_all

pytestmark = pytest.mark.real

DASHBOARD_DIR = REPO / "grafana" / "dashboards"

# The public contract (docs/design.md §8, README, export/gpu_metrics.py): the only series a
# dashboard may read, plus Prometheus' own ALERTS.
CONTRACT = frozenset(
    {
        "tritonwatch_build_info",
        "tritonwatch_up",
        "tritonwatch_config_last_reload_successful",
        "tritonwatch_config_last_reload_success_timestamp_seconds",
        "tritonwatch_canary_requests_total",
        "tritonwatch_latency_quantile_seconds",
        "tritonwatch_latency_quantile_seconds_sum",
        "tritonwatch_latency_quantile_seconds_count",
        "tritonwatch_sweep_throughput_inferences_per_second",
        "tritonwatch_sweep_latency_seconds",
        "tritonwatch_sweep_latency_seconds_sum",
        "tritonwatch_sweep_latency_seconds_count",
        "tritonwatch_sweep_knee_concurrency",
        "tritonwatch_sweep_operating_point_concurrency",
        "tritonwatch_sweep_last_run_timestamp_seconds",
        "tritonwatch_gpu_info",
        "tritonwatch_gpu_utilization_ratio",
        "tritonwatch_gpu_memory_used_bytes",
        "tritonwatch_gpu_memory_total_bytes",
        "tritonwatch_gpu_memory_reserved_bytes",
        "tritonwatch_gpu_memory_busy_ratio",
        "tritonwatch_gpu_power_watts",
        "tritonwatch_gpu_power_limit_watts",
        "tritonwatch_gpu_energy_joules_total",
        "tritonwatch_gpu_sm_clock_hertz",
        "tritonwatch_gpu_memory_clock_hertz",
        "tritonwatch_gpu_temperature_celsius",
        "tritonwatch_gpu_fan_speed_ratio",
        "tritonwatch_gpu_sm_active_ratio",
        "tritonwatch_gpu_sm_occupancy_ratio",
        "tritonwatch_gpu_tensor_active_ratio",
        "tritonwatch_gpu_clock_event_reasons",
        "tritonwatch_gpu_process_memory_used_bytes",
        "tritonwatch_nvml_query_failures_total",
        "tritonwatch_model_throughput_inferences_per_second",
        "tritonwatch_model_requests_per_second",
        "tritonwatch_model_batch_size_average",
        "tritonwatch_model_pending_requests",
        "tritonwatch_model_latency_breakdown_seconds",
        "tritonwatch_model_failures_per_second",
        "tritonwatch_slo_objective_ratio",
        "tritonwatch_slo_events_total",
        "tritonwatch_slo_good_events_total",
        "tritonwatch_slo_error_budget_remaining_ratio",
        "tritonwatch_recommendation",
        "tritonwatch_experiment_verdict",
        "tritonwatch_canary_output_tokens_total",
        "tritonwatch_canary_stream_quantile_seconds",
        "tritonwatch_canary_stream_quantile_seconds_sum",
        "tritonwatch_canary_stream_quantile_seconds_count",
        "tritonwatch_llm_kv_cache_usage_ratio",
        "tritonwatch_llm_requests",
        "tritonwatch_llm_preemptions_total",
        "tritonwatch_llm_generation_tokens_per_second",
        "tritonwatch_llm_prompt_tokens_per_second",
        # Capacity and headroom (issue 38, export/capacity_metrics.py), spelled out: a
        # renamed constant must break this contract, not follow it.
        "tritonwatch_capacity_inferences_per_second",
        "tritonwatch_capacity_closed_loop_inferences_per_second",
        "tritonwatch_capacity_age_seconds",
        "tritonwatch_capacity_load_inferences_per_second",
        "tritonwatch_capacity_canary_requests_per_second",
        "tritonwatch_capacity_load_trend_inferences_per_second_per_second",
        "tritonwatch_capacity_headroom_ratio",
        "tritonwatch_capacity_exhaustion_seconds",
        "tritonwatch_capacity_stale",
        "tritonwatch_capacity_compute_drift_ratio",
        "tritonwatch_desired_replicas",
        "tritonwatch_cost_per_1k_inferences",
        "tritonwatch_gpu_seconds_per_1k_inferences",
        "ALERTS",
    }
)
NOT_ON_DASHBOARDS: dict[str, str] = {
    # Family (as on its ``# TYPE`` line) → why the daemon exports it but no dashboard reads it.
    "tritonwatch_alerts_queue_length": "alert delivery self-monitoring, for users' own alerts",
    "tritonwatch_slo_alert_min_bad_events": "the burn alerts' minimum-events gate (rules)",
    "tritonwatch_canary_stalled": "the daemon's own liveness: TritonwatchCanaryStalled reads it",
    "tritonwatch_canary_engine_restarts_total": "the daemon's own liveness, for its runbook",
    "tritonwatch_alerts_sent_total": "alert delivery self-monitoring, for users' own alerts",
    "tritonwatch_alerts_dropped_total": "alert delivery self-monitoring, for users' own alerts",
    "tritonwatch_alerts_rejected_total": "alert delivery self-monitoring, for users' own alerts",
    "tritonwatch_alert_delivery_failures_total": "alert delivery self-monitoring",
    "tritonwatch_canary_circuit_open": "canary state; the status page shows it",
    "tritonwatch_canary_skipped": "design §8; a model the canary cannot fill, status page",
    "tritonwatch_canary_input_refused": "a model refusing the canary's input, status page",
    "tritonwatch_canary_total_rate_requests_per_second": "the canary budget (guides/slos.md)",
    "tritonwatch_canary_rate_scale_ratio": "the canary budget's factor (guides/slos.md)",
    "tritonwatch_advice_blocked": "design §7; why a burning model has no advice, status page",
    "tritonwatch_scrape_success": "design §8 self-monitoring of the Triton scrapes",
    "tritonwatch_scrape_duration_seconds": "design §8 self-monitoring of the Triton scrapes",
    "tritonwatch_scrape_failures_total": "self-monitoring of the Triton scrapes",
    "tritonwatch_scrape_bad_lines_total": "self-monitoring: unparsable lines in Triton /metrics",
    "tritonwatch_model_bottleneck": "the advisor's diagnosis, shown on the status page",
    "tritonwatch_model_batch_executions_per_second": "advisor input (batches vs requests)",
    "tritonwatch_model_config_max_queue_delay_seconds": "model config as scraped",
    "tritonwatch_model_config_instances": "model config as scraped",
    # Pipelines and the response cache (issue 36, export/step_metrics.py).
    "tritonwatch_model_step_latency_seconds": "a pipeline's steps; the status page shows them",
    "tritonwatch_model_step_calls": "a pipeline's step calls per request, for users' queries",
    "tritonwatch_model_cache_hit_ratio": "response cache; the status page shows it",
    "tritonwatch_model_cache_hit_seconds": "response cache; the status page shows it",
    "tritonwatch_model_cache_miss_seconds": "response cache; the status page shows it",
    "tritonwatch_server_cpu_utilization_ratio": "Triton host CPU, from Triton /metrics",
    "tritonwatch_server_cpu_memory_used_bytes": "Triton host memory, from Triton /metrics",
    "tritonwatch_server_cpu_memory_total_bytes": "Triton host memory, from Triton /metrics",
    "tritonwatch_server_pinned_memory_used_bytes": "Triton pinned memory, from Triton /metrics",
    "tritonwatch_server_pinned_memory_total_bytes": "Triton pinned memory, from Triton /metrics",
    # Streaming canary (issue 18, export/stream_metrics.py): the TTFT/ITL quantile and
    # output tokens/s panels of dashboards/latency.py come with the daemon's wiring.
}
"""The allow-list: ``tritonwatch_`` families outside the contract, each with the reason.
The daemon runs at its default detail level (``standard``): families of ``full`` only
are in neither list, and no dashboard may read them."""
MIXIN_RULES = REPO / "mixin" / "prometheus_rules.yaml"
RECORDED = frozenset(
    rule["record"]
    for group in yaml.safe_load(MIXIN_RULES.read_text())["groups"]
    for rule in group["rules"]
)
"""What the shipped recording rules record: dashboards may read these too (the mixin
ships both; Prometheus computes burn rates from the SLI counters)."""
READABLE = CONTRACT | RECORDED
PANEL_TYPES = frozenset(
    {"row", "timeseries", "stat", "table", "barchart", "state-timeline", "heatmap"}
)


def _committed() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


ALL = _committed()


def _values(dashboard: dict[str, Any]) -> dict[str, str]:
    """A value for every variable: a regex for query variables, defaults for the rest."""
    values = dict(GRAFANA_BUILTINS)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            values[variable["name"]] = ".*"
        elif variable["type"] in ("textbox", "custom"):
            values[variable["name"]] = variable["current"]["value"]
    return values


def test_committed_json_is_what_the_generator_builds() -> None:
    """Breaks if a committed file drifts from the generator or a stray file appears."""
    # Only drift: that the dashboards read real metrics is checked against a daemon below.
    assert {name: json.dumps(d, indent=2) for name, d in ALL.items()} == {
        name: json.dumps(json.loads(text), indent=2) for name, text in render_all().items()
    }
    for name, text in render_all().items():
        assert (DASHBOARD_DIR / name).read_text() == text, f"{name}: byte-for-byte"
    checked = subprocess.run(
        [sys.executable, "-m", "tritonwatch.dashboards", "--check", "--out", str(DASHBOARD_DIR)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


def test_six_dashboards_with_unique_uids_and_titles() -> None:
    """Six dashboards with unique, prefixed uids and titles, and no id for provisioning."""
    assert len(ALL) == len(DASHBOARDS) == 6
    uids = [d["uid"] for d in ALL.values()]
    titles = [d["title"] for d in ALL.values()]
    assert len(set(uids)) == len(uids)
    assert len(set(titles)) == len(titles)
    for dashboard in ALL.values():
        assert dashboard["uid"].startswith("tritonwatch-")
        assert len(dashboard["uid"]) <= 40  # Grafana's limit
        assert "id" not in dashboard  # file provisioning assigns ids
        assert dashboard["schemaVersion"] >= 36
        assert "tritonwatch" in dashboard["tags"]


@pytest.mark.parametrize("name", sorted(ALL))
def test_panels_are_well_formed_and_do_not_overlap(name: str) -> None:
    """Panels have unique ids, fit the grid, never overlap, and each says what it shows."""
    panels = ALL[name]["panels"]
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["description"], "every panel says what it shows"
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs)
        for source in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            assert source == {"type": "prometheus", "uid": "${datasource}"}
    # Rows and panels are in reading order, so a screen reader and the JSON agree.
    positions = [(p["gridPos"]["y"], p["gridPos"]["x"]) for p in panels]
    assert all(a <= b for a, b in pairwise(positions))


@pytest.mark.parametrize("name", sorted(ALL))
def test_templated_on_datasource_target_and_model(name: str) -> None:
    """Each dashboard has datasource, target and model variables, and uses no undefined one."""
    dashboard = ALL[name]
    by_name = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert by_name["datasource"]["type"] == "datasource"
    assert by_name["datasource"]["query"] == "prometheus"
    for variable in ("target", "model"):
        assert by_name[variable]["type"] == "query"
        assert by_name[variable]["datasource"]["uid"] == "${datasource}"
        assert by_name[variable]["definition"].startswith("label_values(")
    # Every variable a query uses is defined (or one of Grafana's own).
    defined = set(by_name) | set(GRAFANA_BUILTINS)
    for where, expr in expressions(dashboard):
        assert variables(expr) <= defined, f"{where}: {variables(expr) - defined}"
    for variable in by_name.values():
        assert variables(variable.get("definition", "")) <= defined


@pytest.mark.parametrize("name", sorted(ALL))
def test_queries_read_only_exported_metrics(name: str) -> None:
    """Every panel and variable query reads only metrics in the exporter's contract."""
    dashboard = ALL[name]
    values = _values(dashboard)
    used: set[str] = set()
    for where, expr in expressions(dashboard):
        names = metric_names(substitute(expr, values))
        assert names or expr.startswith("vector("), f"{where}: reads no metric: {expr}"
        assert names <= READABLE, f"{where}: not in the contract: {names - READABLE}"
        used |= names
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            series = variable["definition"].removeprefix("label_values(").rsplit(",", 1)[0]
            assert metric_names(substitute(series, values)) <= CONTRACT
    assert used


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """promtool parses each query (variables substituted) as a recording rule: a syntax
    error fails here, without a Prometheus server."""
    rules = []
    for dashboard in ALL.values():
        values = _values(dashboard)
        for where, expr in expressions(dashboard):
            rules.append(
                {"record": f"dashboard:check_{len(rules)}", "expr": substitute(expr, values)}
            )
            rules[-1]["labels"] = {"panel": f"{dashboard['uid']} {where}"}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (target, model) (rate(a_total{le="0.05",x=~"$t"}[5m]))', {"a_total"}),
        ("x / ignoring (stage) group_left sum without (stage) (x)", {"x"}),
        ("histogram_quantile(0.95, sum by (le) (rate(b_bucket[1m]))) > 1e3", {"b_bucket"}),
        ("a and on (gpu, reason) (max_over_time(b[5m] offset 1m) > 0)", {"a", "b"}),
        ("vector(0.05)", set()),
        ('ALERTS{alertname=~"Triton.*"}', {"ALERTS"}),
        ("tritonwatch:slo_burn:ratio * 1000", {"tritonwatch:slo_burn:ratio"}),
    ],
)
def test_metric_names_reads_promql(expr: str, names: set[str]) -> None:
    """The tokenizer behind the contract check finds metrics and nothing else."""
    assert metric_names(expr) == names


_TYPE_LINE = re.compile(r"^# TYPE (\S+) (\w+)$", re.MULTILINE)
_SAMPLE_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def _sample_names(family: str, kind: str) -> set[str]:
    """The sample names a family of type ``kind`` writes in the text exposition format."""
    return {family + suffix for suffix in _SAMPLE_SUFFIXES.get(kind, ("",))}


@pytest.fixture(scope="module")
def daemon_families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Family → type, off the ``# TYPE`` lines of a real ``tritonwatch run`` watching the
    simulator, scraped once its canary has results (families without samples count: a
    GPU family is declared on a host without a GPU)."""
    from tritonwatch.sim.server import Simulator

    folder = tmp_path_factory.mktemp("daemon")
    with Simulator() as sim:
        config = folder / "tritonwatch.yaml"
        config.write_text(
            "scrape: {interval: 1s, timeout: 500ms}\n"
            f"targets: [{{name: sim, url: '{sim.http_url}', metrics_url: '{sim.metrics_url}',"
            " models: [{name: simple}]}]\n"
        )
        daemon = DaemonProcess(config)
        try:
            daemon.wait_for_event("started", timeout=30)

            def with_canary_results() -> str | None:
                text = daemon.metrics()
                return text if 'outcome="success"' in text else None

            exposition: str = wait_until(with_canary_results, 20, "the first canary results")
        finally:
            assert daemon.stop() == 0
    return dict(_TYPE_LINE.findall(exposition))


def _exported_samples(families: dict[str, str]) -> set[str]:
    return {name for family, kind in families.items() for name in _sample_names(family, kind)}


def test_the_contract_names_only_metrics_the_daemon_exports(
    daemon_families: dict[str, str],
) -> None:
    """Breaks if the daemon stops exporting (or renames) a metric the contract promises."""
    missing = CONTRACT - {"ALERTS"} - _exported_samples(daemon_families)
    assert not missing, f"in CONTRACT, not on the daemon's /metrics: {sorted(missing)}"


def test_every_exported_family_is_in_the_contract_or_allowed(
    daemon_families: dict[str, str],
) -> None:
    """Breaks if an exported tritonwatch_ family is in neither list, or the allow-list is stale."""
    ours = {f: kind for f, kind in daemon_families.items() if f.startswith("tritonwatch_")}
    unlisted = {
        family: sorted(_sample_names(family, kind) - CONTRACT)
        for family, kind in ours.items()
        if not _sample_names(family, kind) <= CONTRACT and family not in NOT_ON_DASHBOARDS
    }
    assert not unlisted, f"exported, in neither CONTRACT nor NOT_ON_DASHBOARDS: {unlisted}"
    stale = set(NOT_ON_DASHBOARDS) - set(ours)
    assert not stale, f"NOT_ON_DASHBOARDS lists families the daemon does not export: {stale}"
    both = {f for f in NOT_ON_DASHBOARDS if f in ours and _sample_names(f, ours[f]) & CONTRACT}
    assert not both, f"in CONTRACT and NOT_ON_DASHBOARDS at once: {both}"


@pytest.mark.parametrize("name", sorted(ALL))
def test_committed_dashboards_read_what_the_daemon_exports(
    name: str, daemon_families: dict[str, str]
) -> None:
    """Breaks if a committed dashboard reads a metric the running daemon does not export."""
    dashboard = ALL[name]
    values = _values(dashboard)
    exported = _exported_samples(daemon_families) | {"ALERTS"} | RECORDED
    for where, expr in expressions(dashboard):
        names = metric_names(substitute(expr, values))
        assert names <= exported, f"{where}: not on the daemon's /metrics: {names - exported}"
