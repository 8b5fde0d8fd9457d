"""The first contact, Prometheus side: ``tritonwatch run --url`` with no config against
real Triton, the shipped mixin's rule files loaded unchanged into a real Prometheus that
scrapes the daemon. Prometheus itself raises ``TritonSLOBurn`` for a model over the
default 50 ms latency budget, and none for a healthy model beside it: the rules need no
list of models (issue 40)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from alerting_support import Prometheus
from kinds import SECOND_REAL_TRITON
from real_triton import RealTriton
from support import REPO, DaemonProcess, wait_until

pytestmark = [pytest.mark.real, pytest.mark.xdist_group(SECOND_REAL_TRITON)]

MIXIN_RULES = (REPO / "mixin" / "prometheus_rules.yaml", REPO / "mixin" / "prometheus_alerts.yaml")
SLOW = "saturating"
"""Reloaded to take 54 ms a request: every canary request is over the 50 ms default."""
HEALTHY = "batching"
"""About 2 ms a request."""
SLOW_MS = "54"


def _burns(prometheus: Prometheus, model: str) -> list[dict[str, Any]]:
    query = f'ALERTS{{alertname="TritonSLOBurn",alertstate="firing",model="{model}"}}'
    return prometheus.query(query)


def test_the_shipped_rules_page_for_a_discovered_model_over_its_budget_and_not_its_neighbour(
    real_triton: RealTriton, tmp_path: Path
) -> None:
    triton = real_triton
    config = copy.deepcopy(triton.config(SLOW))
    config["parameters"]["base_ms"] = {"string_value": SLOW_MS}
    triton.load(SLOW, config)
    daemon = None
    prometheus = None
    try:
        flags = {
            "--url": triton.http_url,
            "--metrics-url": triton.metrics_url,
            "--models-include": f"^({SLOW}|{HEALTHY})$",
        }
        daemon = DaemonProcess(None, *(part for pair in flags.items() for part in pair))
        prometheus = Prometheus(tmp_path, daemon.url.removeprefix("http://"), MIXIN_RULES)
        wait_until(prometheus.ready, timeout=20, what="Prometheus to listen", every=0.1)

        paged = wait_until(
            lambda: _burns(prometheus, SLOW),
            timeout=90,
            what=f"Prometheus' TritonSLOBurn for {SLOW}",
            every=1,
        )
        labels = {alert["metric"]["severity"] for alert in paged}
        assert "page" in labels, paged
        (page,) = [a["metric"] for a in paged if a["metric"]["severity"] == "page"]
        assert page["slo"] == "latency" and page["source"] == "canary", page

        # The healthy neighbour is judged by the same rules (its ratios are recorded) and
        # raises nothing.
        judged = prometheus.query(
            f'tritonwatch:slo_sli_error:ratio_rate5m{{model="{HEALTHY}",slo="latency"}}'
        )
        assert judged and float(judged[0]["value"][1]) < 0.05, judged
        assert prometheus.query(f'ALERTS{{model="{HEALTHY}"}}') == []
        # The objective Prometheus judged by is the daemon's default, exported.
        objective = prometheus.query(f'tritonwatch:slo_objective:ratio{{model="{SLOW}"}}')
        assert {o["metric"]["slo"]: float(o["value"][1]) for o in objective} == {
            "latency": 0.95,
            "availability": 0.999,
        }
    finally:
        if prometheus is not None:
            prometheus.stop()
        if daemon is not None:
            daemon.stop()
        triton.reset(SLOW)
