"""The model's GPU utilisation as Triton reports it, read while a sweep step runs
(the model's GPUs chosen as the daemon chooses them: :func:`model_gpus`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.records.target_state import model_gpus
from tritonwatch.scrape.triton_text import parse_triton_metrics

UTILIZATION = "nv_gpu_utilization"


def model_gpu_indices(config: dict[str, Any]) -> list[int]:
    return sorted({int(i) for g in config.get("instance_group") or [] for i in g.get("gpus") or []})


def gpu_utilization_probe(
    metrics_url: str,
    indices: Callable[[], list[int]],
    timeout: float = 5.0,
    tls: ClientTLS | None = None,
) -> Callable[[], float | None]:
    """A probe for :class:`~tritonwatch.sweep.load_sweep.SweepRunner`; never raises."""
    session = requests.Session()
    if tls is not None:
        tls.configure_session(session)

    def probe() -> float | None:
        try:
            text = session.get(metrics_url, timeout=timeout).text
        except requests.RequestException:
            return None
        gpus = list(parse_triton_metrics(text, time.monotonic()).gpus.values())
        chosen = model_gpus(gpus, indices())
        values = [g[UTILIZATION] for g in chosen if UTILIZATION in g]
        return sum(values) / len(values) if values else None

    return probe
