"""The status page's "what the client adds" line: end to end = server + client & network."""

from __future__ import annotations

import re
from types import MappingProxyType

import pytest

from tritonwatch.analysis.breakdown import latency_breakdown
from tritonwatch.export.status_page import (
    ClientShare,
    ModelStatus,
    StatusSnapshot,
    render_status_page,
)
from tritonwatch.records.observations import ModelRates


def _rates(request: float) -> ModelRates:
    return ModelRates(
        model="m",
        version="",
        interval_seconds=1.0,
        counters_reset=False,
        requests_per_second=20.0,
        inferences_per_second=20.0,
        executions_per_second=20.0,
        failures_per_second=0.0,
        failures_per_second_by_reason=MappingProxyType({}),
        batch_size_average=1.0,
        request_seconds_average=request,
        queue_seconds_average=0.0003,
        compute_input_seconds_average=0.00005,
        compute_infer_seconds_average=0.0029,
        compute_output_seconds_average=0.0003,
        pending_requests=0.0,
    )


def _line(share: ClientShare | None) -> str:
    status = ModelStatus("t", "m", "grpc", True, 0.01, {"p95": 0.005}, {"success": 9},
                         client_share=share)  # fmt: skip
    html = render_status_page(StatusSnapshot([status]))
    match = re.search(r'<p class="client-share"[^>]*>.*?</p>', html)
    assert match is not None
    return match.group(0)


def test_the_line_adds_up_and_carries_the_exact_seconds() -> None:
    """Breaks if the page's client end to end is not server + client & network, or its
    share, stages or data attributes drift from the breakdown they come from."""
    share = ClientShare.of(latency_breakdown(_rates(0.0036), 0.0041))
    line = _line(share)
    assert "client end to end <b>4.10 ms</b> = server 3.60 ms" in line
    assert "(queue 0.30 ms, compute 3.25 ms, other 0.05 ms)" in line
    assert '<b class="client-network">0.50 ms (12%)</b>' in line
    values = dict(re.findall(r'data-([a-z-]+)-seconds="([^"]+)"', line))
    assert float(values["end-to-end"]) == 0.0041
    assert float(values["server"]) == 0.0036
    assert float(values["client-network"]) == pytest.approx(0.0005, abs=1e-15)


def test_a_negative_residual_is_shown_as_measured_with_the_reason() -> None:
    """Breaks if a canary faster than Triton's all-clients mean is clamped to 0 on the page
    (then end to end would no longer equal server + client & network) or left unexplained."""
    share = ClientShare.of(latency_breakdown(_rates(0.0045), 0.0041))
    assert share is not None and share.client_network_seconds == pytest.approx(-0.0004)
    line = _line(share)
    assert '<b class="client-network">-0.40 ms (-10%)</b>' in line
    assert "covers every client" in line


@pytest.mark.parametrize(
    ("share", "text"),
    [
        (None, "client end to end – = server – + client &amp; network – "
               "<span class=\"muted\">(no Triton statistics yet)"),
        (ClientShare.of(latency_breakdown(_rates(0.0036), None)),
         "client end to end <b>–</b> = server 3.60 ms"),
    ],
)  # fmt: skip
def test_unknown_parts_are_a_dash(share: ClientShare | None, text: str) -> None:
    """Breaks if the page invents a number (or crashes) before Triton's statistics have
    a window, or in a window the canary sent nothing."""
    line = _line(share)
    assert text in line
    assert "data-client-network-seconds" not in line
    if share is not None:
        assert '<b class="client-network">–</b>' in line and "no canary requests" in line


def test_a_decoupled_models_stream_is_the_models_time_not_the_networks() -> None:
    """Breaks if the page calls a decoupled model's streaming time (after execute()
    returned) client and network time, as it did before; a plain model's stays so."""
    streamed = ClientShare.of(latency_breakdown(_rates(0.0036), 0.0134, decoupled=True))
    assert streamed is not None and streamed.streamed
    line = _line(streamed)
    assert "+ the model's stream" in line and "client &amp; network" not in line
    assert "execute() returns" in line
    plain = ClientShare.of(latency_breakdown(_rates(0.0036), 0.0134))
    assert plain is not None and not plain.streamed
    assert "+ client &amp; network" in _line(plain)
