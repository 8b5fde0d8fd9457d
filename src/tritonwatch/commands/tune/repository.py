"""Reading and applying a model's configuration through Triton's repository API.

Always GET the whole config, change one field, POST the whole config back with
``v2/repository/models/{m}/load`` (``{"parameters": {"config": "<JSON>"}}``), through
the model API client (:mod:`tritonwatch.triton_api`) over the URL's protocol.
Triton updates an instance-count-only change in place and reloads for the rest,
without downtime; it refuses loads unless started with ``--model-control-mode=explicit``.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.endpoint import url_endpoint

NOT_EXPLICIT_HINT = "not allowed"
READY_TIMEOUT_SECONDS = 60.0
CONFIG_TIMEOUT_SECONDS = 10.0
READY_POLL_SECONDS = 0.1


class TuneError(Exception):
    """The server refused or failed a step; the message says what and why."""


class NotExplicitModeError(TuneError):
    """The server does not accept model loads (not in explicit model-control mode)."""


class ModelRepository:
    """One model's config on one server, over HTTP or gRPC (the URL's scheme)."""

    def __init__(
        self, url: str, model: str, version: str = "", tls: ClientTLS | None = None
    ) -> None:
        self.model, self.version = model, version
        self._client = ModelApiClient(url_endpoint(url, tls), timeout=CONFIG_TIMEOUT_SECONDS)

    def config(self) -> dict[str, Any]:
        """The model's whole current config (Triton's JSON form, snake_case).

        Raises:
            TuneError: the config could not be read.
        """
        answer = self._client.model_config(self.model, self.version)
        if not answer.ok:
            raise TuneError(f"reading {self.model}'s config failed: {answer.reason}")
        return copy.deepcopy(dict(answer.document))

    def apply(self, config: dict[str, Any], timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Loads ``config`` and waits until the model is ready again.

        Raises:
            NotExplicitModeError: the server refuses loads.
            TuneError: the load failed, or the model did not become ready.
        """
        deadline = time.monotonic() + timeout
        answer = self._client.load(self.model, config, deadline=deadline)
        if not answer.ok:
            message = answer.reason
            if NOT_EXPLICIT_HINT in message:
                raise NotExplicitModeError(
                    f"the server refuses model loads ({message}); tune needs Triton started "
                    "with --model-control-mode=explicit"
                )
            raise TuneError(f"loading {self.model} failed: {message}")
        while not self._client.model_ready(self.model, self.version, deadline=deadline).document:
            if time.monotonic() > deadline:
                raise TuneError(f"{self.model} was not ready {timeout:g} s after the load")
            time.sleep(READY_POLL_SECONDS)

    def close(self) -> None:
        self._client.close()


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Top-level fields whose value differs: ``{field: (before, after)}``."""
    return {
        key: (before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    }


def to_pbtxt(config: dict[str, Any], fields: list[str] | None = None) -> str:
    """``config`` (or only ``fields`` of it) in ``config.pbtxt`` syntax, via the real
    ``ModelConfig`` protobuf shipped in tritonclient."""
    from google.protobuf import json_format, text_format  # noqa: PLC0415
    from tritonclient.grpc import model_config_pb2  # noqa: PLC0415

    selected = config if fields is None else {k: config[k] for k in fields if k in config}
    message = json_format.ParseDict(
        selected, model_config_pb2.ModelConfig(), ignore_unknown_fields=True
    )
    text: str = text_format.MessageToString(message)
    return text
