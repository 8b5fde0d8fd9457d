"""A model's metadata and config for its canary, asked until the server answers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.kserve.payload import PayloadError
from tritonwatch.kserve.server_errors import server_error_types
from tritonwatch.probe.canary.clients import classify_error
from tritonwatch.probe.canary.inference_client import InferenceClient
from tritonwatch.probe.canary.plans import CanaryPlan
from tritonwatch.records.model_traits import model_traits
from tritonwatch.state.canary_board import CanaryBoard

_log = get_logger("canary")
METADATA_RETRY_MIN_SECONDS = 1.0
METADATA_RETRY_MAX_SECONDS = 10.0
"""As the breaker's probe period: a server back up sees the canary within 10 s, whether it
was down at start or went down later (under the default 15 s scrape interval)."""


ModelInfo = tuple[dict[str, Any], dict[str, Any] | None]
"""A model's metadata and config (None: the server has no config API)."""


async def fetch_model_info(
    client: InferenceClient, plan: CanaryPlan, stats: CanaryBoard
) -> ModelInfo:
    """The model's metadata and config (None: the server has no config API), retried
    with backoff while the server is unreachable; the board notes the canary as
    unprepared meanwhile."""
    delay = METADATA_RETRY_MIN_SECONDS
    # The server refusing (either client's error class), unreachable, or slow.
    retryable: tuple[type[BaseException], ...] = (*server_error_types(), OSError, TimeoutError)
    while True:
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a
            # cancellation that races with completion, and the task never ends.
            async with asyncio.timeout(plan.timeout):
                metadata = await client.metadata(plan.model, plan.version)
            async with asyncio.timeout(plan.timeout):
                config = await client.config(plan.model, plan.version)
            break
        except retryable as error:
            _log.warning(
                "canary_metadata_unavailable",
                target=plan.target,
                model=plan.model,
                outcome=str(classify_error(error, plan.protocol)),
                error=str(error)[:200],
                retry_in_seconds=delay,
            )
            stats.set_unprepared(plan.key, True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, METADATA_RETRY_MAX_SECONDS)
    stats.set_unprepared(plan.key, False)
    if config is None:
        _log.info("model_config_api_unavailable", target=plan.target, model=plan.model)
    return metadata, config


def report_skipped(plan: CanaryPlan, stats: CanaryBoard, error: PayloadError, at: float) -> None:
    """One ``canary_skipped`` line and the board's reason (``tritonwatch_canary_skipped``,
    the status page) for a model whose request cannot be built: not retried, since its
    metadata will not change by waiting; a config reload prepares it again."""
    _log.warning(
        "canary_skipped",
        target=plan.target,
        model=plan.model,
        input=error.input_name,
        reason=error.reason,
    )
    stats.set_skipped(plan.key, error.reason, at)


def is_decoupled(config: Mapping[str, Any] | None) -> bool:
    """Whether a model config (HTTP JSON form) says the model may answer a request any
    number of times (``model_transaction_policy.decoupled``): a generative model."""
    return model_traits(config).decoupled
