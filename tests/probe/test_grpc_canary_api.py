"""Where a gRPC canary asks its model's metadata and config: the target's HTTP API,
unless the target is gRPC-only (``url`` grpc:// and no ``http_url``), the scrapers' rule.

Over HTTP the daemon never loads ``grpc`` and ``tritonclient.grpc`` for it (issue 15's
footprint: tests/triton/test_grpc_canary_imports_real.py); the answers must be the same
documents the gRPC API gives once normalised, so the canary builds the same requests.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from real_triton import RealTriton
from tritonwatch.config import parse_config
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.probe.canary.plans import canary_plans

pytestmark = pytest.mark.real


def test_only_a_target_without_an_http_api_is_grpc_only() -> None:
    """Breaks if a gRPC canary of a target with an HTTP API (its url, or http_url beside
    a grpc:// url) is planned as gRPC-only, or one of a grpc:// target without
    http_url is sent to an HTTP API nobody configured."""
    config = parse_config(
        "targets:\n"
        "  - {name: http, url: http://127.0.0.1:1, models: [{name: m, canary: {protocol: grpc}}]}\n"
        "  - {name: both, url: grpc://127.0.0.1:2, http_url: http://127.0.0.1:3,"
        " models: [{name: m}]}\n"
        "  - {name: grpc, url: grpc://127.0.0.1:4, models: [{name: m}]}\n",
        "apis.yaml",
    )
    plans = {plan.target: plan for plan in canary_plans(config)}
    assert {name: (p.protocol, p.grpc_only) for name, p in plans.items()} == {
        "http": ("grpc", False),
        "both": ("grpc", False),
        "grpc": ("grpc", True),
    }
    assert [t.grpc_only for t in config.targets] == [False, False, True]


def test_metadata_and_config_are_the_same_over_either_api(real_triton: RealTriton) -> None:
    """Breaks if the gRPC canary stops asking the HTTP API when it may (its gRPC URL
    leads nowhere here, so only HTTP can answer), a gRPC-only target stops asking over
    gRPC (its HTTP URL leads nowhere), or the two give the canary different documents
    (a decoupled flag, a dim or an input name lost in either)."""

    async def ask(client: Any) -> list[Any]:
        try:
            return [
                await each
                for model in ("batching", "llm_stream")
                for each in (client.metadata(model, ""), client.config(model, ""))
            ]
        finally:
            await client.close()

    async def both() -> tuple[list[Any], list[Any]]:
        over_http = client_for("grpc", real_triton.http_url, "grpc://127.0.0.1:1")
        over_grpc = client_for("grpc", "http://127.0.0.1:1", real_triton.grpc_url, grpc_only=True)
        return await ask(over_http), await ask(over_grpc)

    over_http, over_grpc = asyncio.run(asyncio.wait_for(both(), 60))
    assert over_http == over_grpc
    metadata, config = over_http[2], over_http[3]
    assert metadata["name"] == "llm_stream"
    assert config["model_transaction_policy"] == {"decoupled": True}
