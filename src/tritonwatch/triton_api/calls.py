"""The calls a model API client makes: what is asked, independent of the protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ApiKind(StrEnum):
    """One API of a KServe v2 server (Triton's extensions included)."""

    SERVER_METADATA = "server_metadata"
    MODEL_METADATA = "model_metadata"
    MODEL_CONFIG = "model_config"
    MODEL_READY = "model_ready"
    STATISTICS = "statistics"
    """One model's statistics; with no model, every loaded model's."""
    REPOSITORY_INDEX = "repository_index"
    LOAD = "load"
    UNLOAD = "unload"


EXPECTED_TYPES: dict[ApiKind, type] = {
    ApiKind.SERVER_METADATA: dict,
    ApiKind.MODEL_METADATA: dict,
    ApiKind.MODEL_CONFIG: dict,
    ApiKind.STATISTICS: dict,
    ApiKind.REPOSITORY_INDEX: list,
}
"""The JSON type of each API's document (HTTP form); an answer of another type is a
bad response. The others answer no document (load, unload) or a bool (ready)."""


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One call: the API, the model and version it is about (``""``: the server's
    choice of version; no model for the server's APIs), for a load the whole model
    config that overrides the repository's (None: load from the files), for the
    repository index whether it lists READY models only."""

    kind: ApiKind
    model: str = ""
    version: str = ""
    config: Mapping[str, Any] | None = None
    ready_only: bool = False


def wrong_type(kind: ApiKind, document: Any) -> str | None:
    """Why ``document`` cannot be ``kind``'s answer; None when it can."""
    expected = EXPECTED_TYPES.get(kind)
    if expected is None or isinstance(document, expected):
        return None
    return f"{kind}: expected a JSON {expected.__name__}, got {type(document).__name__}"


def ready_rows(rows: list[Any]) -> list[Any]:
    """The repository index's rows of READY models (what ``{"ready": true}`` asks
    Triton's HTTP API for; gRPC's ``RepositoryIndex`` is filtered here the same way)."""
    return [row for row in rows if isinstance(row, dict) and row.get("state") == "READY"]
