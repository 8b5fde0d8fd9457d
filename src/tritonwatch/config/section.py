"""The base of every config section, and the protocol names sections share."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

TargetProtocol = Literal["http", "grpc"]
"""What a target's ``url`` speaks (Triton's KServe v2 API over HTTP or gRPC)."""
Protocol = Literal["http", "grpc", "openai"]
"""What a canary speaks: one of the target's, or an OpenAI-compatible server
(``targets[].openai_url``: vLLM, trtllm-serve, Triton's OpenAI frontend), which only
streams (``canary.stream``)."""


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)
