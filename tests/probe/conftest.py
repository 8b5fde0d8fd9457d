"""Fixtures of the probe tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stream_real_support import MODEL

from real_triton import RealTriton


@pytest.fixture(scope="module")
def fast_stream(real_triton: RealTriton) -> Iterator[RealTriton]:
    """``llm_stream`` with a 20 ms first token and 2 ms gaps (a short run); put back after."""
    config = real_triton.config(MODEL)
    config["parameters"]["first_token_ms"] = {"string_value": "20"}
    config["parameters"]["token_gap_ms"] = {"string_value": "2"}
    real_triton.load(MODEL, config)
    yield real_triton
    real_triton.reset(MODEL)
