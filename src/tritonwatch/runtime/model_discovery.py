"""Model discovery: which models a target serves, from its repository index.

A target whose ``models:`` is a selection (or absent) is watched for every READY model
that the server's repository index lists (``POST /v2/repository/index`` with
``{"ready": true}``, or gRPC ``RepositoryIndex`` for a gRPC-only target), filtered by
``include``/``exclude`` and capped at ``discovery.max_models_per_target``; its
``listed`` models are always watched, with their own settings.

The daemon reads the index again every ``discovery.model_refresh_interval``: when the
set changes — a model loaded, unloaded, or reloaded with other inputs, outputs or
batching (so the canary builds its request again) — it re-applies the config as a
reload does: the canaries of models gone stop and their series disappear, new ones
start, a reloaded one restarts, and the others run on untouched. A server that cannot
be read keeps the models found last, so a blip does not drop them. Reaching the cap is
logged once, when it is reached, not on every read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import requests

from tritonwatch.common.client_tls import tls_for
from tritonwatch.common.kserve import model_path
from tritonwatch.common.logs import get_logger
from tritonwatch.config.schema import Config, ModelSelection, TargetConfig, WatchedModel

_log = get_logger("model_discovery")
READY = "READY"
MAX_ANSWER_BYTES = 16 * 2**20


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One row of the repository index: a model version and its state."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class FoundModel:
    """A discovered model; ``signature`` changes when a reload changes what its canary
    sends (see :func:`describe`)."""

    name: str
    signature: str = ""


@dataclass(frozen=True, slots=True)
class TargetModels:
    """What one read of a target's index found."""

    models: tuple[FoundModel, ...]
    left_out: tuple[str, ...] = ()
    """Models selected but past ``discovery.max_models_per_target``: not watched."""


class DiscoveryError(Exception):
    """The index could not be read (unreachable, refused, not JSON)."""


def parse_index(document: object) -> list[IndexEntry]:
    """The entries of an index answer (HTTP: a list; gRPC as JSON: ``{"models": [...]}``)."""
    rows = document.get("models", []) if isinstance(document, dict) else document
    if not isinstance(rows, list):
        raise DiscoveryError("the repository index is not a list")
    entries = []
    for row in rows:
        if isinstance(row, dict) and row.get("name"):
            entries.append(
                IndexEntry(
                    str(row["name"]),
                    str(row.get("version", "")),
                    str(row.get("state", "")),
                    str(row.get("reason", "")),
                )
            )
    return entries


def ready_names(entries: Iterable[IndexEntry]) -> list[str]:
    """Names with at least one READY version, sorted, each once."""
    return sorted({entry.name for entry in entries if entry.state.upper() == READY})


def select_names(selection: ModelSelection, names: Iterable[str]) -> list[str]:
    """The discovered names include/exclude select, sorted; listed models are left out
    (they are watched besides, with their own settings, and do not count to the cap)."""
    listed = {model.name for model in selection.listed}
    return [n for n in sorted(set(names)) if n not in listed and selection.selects(n)]


def resolved_models(
    selection: ModelSelection, found: Iterable[FoundModel]
) -> tuple[WatchedModel, ...]:
    """The listed models, then one default entry per discovered one that ``selection``
    selects: a reload that narrows the selection drops the models it leaves out at
    once, without waiting for the next read of the index."""
    listed = {model.name for model in selection.listed}
    discovered = tuple(
        WatchedModel(name=model.name)
        for model in found
        if model.name not in listed and selection.selects(model.name)
    )
    return (*selection.listed, *discovered)


def with_discovered_models(config: Config, found: Mapping[str, tuple[FoundModel, ...]]) -> Config:
    """``config`` with each discovering target's models resolved from ``found`` (a target
    not found yet has its listed models only); fixed lists stay as they are."""
    targets = []
    for target in config.targets:
        selection = target.selection
        if selection is not None:
            models = resolved_models(selection, found.get(target.name, ()))
            targets.append(target.model_copy(update={"model_spec": models}))
        else:
            targets.append(target)
    return config.model_copy(update={"targets": tuple(targets)})


class ModelReader(Protocol):
    def index(self) -> list[IndexEntry]: ...

    def metadata(self, model: str) -> dict[str, Any]: ...

    def model_config(self, model: str) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


def describe(reader: ModelReader, model: str) -> bytes:
    """What the canary builds its request from (:func:`~tritonwatch.probe.payload.input_specs`,
    the outputs it checks): the metadata, and the config's batching and inputs. A reload
    that changes these rebuilds the canary; one that changes only, say, instance counts
    (as ``tune`` does) needs nothing from discovery and leaves the canary running."""
    config = reader.model_config(model) or {}
    request = {key: config.get(key) for key in ("max_batch_size", "input")}
    return json.dumps([reader.metadata(model), request], sort_keys=True).encode()


def _document(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as error:
        raise DiscoveryError(f"the {what} is not JSON: {error}") from None


class HttpModelReader:
    """The repository index and each model's metadata and config over HTTP."""

    def __init__(self, target: TargetConfig, timeout: float) -> None:
        self._base = target.effective_http_url.rstrip("/")
        self._timeout = timeout
        self._session = requests.Session()
        secure = tls_for(self._base, target.client_tls)
        if secure is not None:
            secure.configure_session(self._session)

    def _call(self, method: str, path: str, body: object = None) -> bytes:
        try:
            with self._session.request(
                method, self._base + path, json=body, timeout=self._timeout, stream=True
            ) as response:
                data = response.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
                if response.status_code != 200:
                    raise DiscoveryError(f"HTTP {response.status_code} from {path}")
        except requests.RequestException as error:
            raise DiscoveryError(str(error)[:300]) from None
        if len(data) > MAX_ANSWER_BYTES:
            raise DiscoveryError(f"the answer to {path} is larger than 16 MiB")
        return bytes(data)

    def index(self) -> list[IndexEntry]:
        data = self._call("POST", "/v2/repository/index", {"ready": True})
        return parse_index(_document(data, "repository index"))

    def metadata(self, model: str) -> dict[str, Any]:
        data = self._call("GET", model_path(model))
        return dict(_document(data, "model metadata"))

    def model_config(self, model: str) -> dict[str, Any] | None:
        data = self._call("GET", model_path(model) + "/config")
        return dict(_document(data, "model config"))

    def close(self) -> None:
        self._session.close()


class GrpcModelReader:
    """The same over gRPC, for a target configured by its gRPC endpoint alone."""

    def __init__(self, target: TargetConfig, timeout: float) -> None:
        import tritonclient.grpc as grpcclient  # noqa: PLC0415 - heavy; gRPC targets only

        secure = tls_for(target.url, target.client_tls)
        creds = secure.grpc_credentials() if secure is not None else None
        self._client: Any = grpcclient.InferenceServerClient(
            target.url.partition("://")[2].rstrip("/"), creds=creds
        )
        self._timeout = timeout

    def _ask(self, call: str, *args: str) -> Any:
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        try:
            return getattr(self._client, call)(*args, as_json=True, client_timeout=self._timeout)
        except (InferenceServerException, OSError, ValueError) as error:
            raise DiscoveryError(str(error)[:300]) from None

    def index(self) -> list[IndexEntry]:
        return parse_index(self._ask("get_model_repository_index"))

    def metadata(self, model: str) -> dict[str, Any]:
        return dict(self._ask("get_model_metadata", model))

    def model_config(self, model: str) -> dict[str, Any] | None:
        answer = self._ask("get_model_config", model)
        return dict(answer.get("config", answer))

    def close(self) -> None:
        self._client.close()


def reader_for(target: TargetConfig, timeout: float) -> ModelReader:
    """gRPC for a gRPC target without ``http_url`` (as the scrapers do); HTTP otherwise."""
    if target.grpc_only:
        return GrpcModelReader(target, timeout)
    return HttpModelReader(target, timeout)


def discover(
    target: TargetConfig, reader: ModelReader, cap: int, known: Mapping[str, FoundModel]
) -> TargetModels:
    """The target's discovered models — the first ``cap`` by name — each with the
    signature of :func:`describe` (a model whose description cannot be read keeps its
    last signature).

    Raises:
        DiscoveryError: the index could not be read.
    """
    selection = target.selection or ModelSelection()
    names = select_names(selection, ready_names(reader.index()))
    found = []
    for name in names[:cap]:
        try:
            signature = hashlib.sha256(describe(reader, name)).hexdigest()[:16]
        except DiscoveryError:
            previous = known.get(name)
            signature = previous.signature if previous is not None else ""
        found.append(FoundModel(name, signature))
    return TargetModels(tuple(found), tuple(names[cap:]))


def signatures(found: Mapping[str, tuple[FoundModel, ...]]) -> dict[tuple[str, str], str]:
    """(target, model) → signature: the canary runner restarts a canary whose changed."""
    return {
        (target, model.name): model.signature
        for target, models in found.items()
        for model in models
    }


class ModelDiscovery:
    """The models found per target, kept between refreshes.

    Who owns what: the daemon's lifecycle owns what is in force (:meth:`commit`, under
    its lock); the model-discovery job reads (:meth:`read`, no lock, network I/O) and
    hands the result over. A read made under a config that a reload has replaced since
    is never committed (:mod:`tritonwatch.runtime.config_owner`).
    """

    def __init__(self, timeout: float = 5.0) -> None:
        self._timeout = timeout
        self._found: dict[str, tuple[FoundModel, ...]] = {}
        self._capped: set[str] = set()
        """Targets at the cap when last read: the cap is logged when one joins."""

    @property
    def found(self) -> Mapping[str, tuple[FoundModel, ...]]:
        return dict(self._found)

    def refresh(self, config: Config) -> bool:
        """Reads (:meth:`read`) and commits (:meth:`commit`) in one go.

        Returns:
            True when what was found differs from before (the config must be re-applied).
        """
        return self.commit(self.read(config))

    def read(self, config: Config) -> dict[str, tuple[FoundModel, ...]]:
        """Reads the index of every discovering target of ``config`` (the effective,
        sharded targets: a replica discovers only on the targets it owns) and returns
        what it found; commits nothing. A target that cannot be read keeps the models
        committed for it before."""
        cap = config.discovery.max_models_per_target
        committed = self._found
        found: dict[str, tuple[FoundModel, ...]] = {}
        for target in config.targets:
            if target.selection is None:
                continue
            previous = committed.get(target.name)
            reader = reader_for(target, self._timeout)
            try:
                known = {model.name: model for model in previous or ()}
                read = discover(target, reader, cap, known)
                found[target.name] = read.models
                self._note_cap(target.name, read, cap)
            except DiscoveryError as error:
                _log.warning("model_discovery_failed", target=target.name, error=str(error))
                if previous is not None:
                    found[target.name] = previous
            finally:
                reader.close()
        self._capped &= found.keys()
        return found

    def differs(self, found: Mapping[str, tuple[FoundModel, ...]]) -> bool:
        """Whether ``found`` differs from what is committed."""
        return dict(found) != self._found

    def commit(self, found: Mapping[str, tuple[FoundModel, ...]]) -> bool:
        """Puts ``found`` in force (the daemon, once it applied it); logs each target's
        changes. Returns whether it differed from what was committed."""
        before, after = self._found, dict(found)
        for target, models in after.items():
            if models != before.get(target):
                _log_changes(target, before.get(target, ()), models)
        self._found = after
        return after != before

    def _note_cap(self, target: str, read: TargetModels, cap: int) -> None:
        """Logs the cap when the target reaches it; while it stays there, nothing more
        (a read a minute would repeat it forever); under it again, it may log again."""
        if not read.left_out:
            self._capped.discard(target)
            return
        if target in self._capped:
            return
        self._capped.add(target)
        _log.warning(
            "model_discovery_cap_reached",
            target=target,
            found=len(read.models) + len(read.left_out),
            cap=cap,
            left_out=list(read.left_out[:10]),
        )


def _log_changes(
    target: str, before: tuple[FoundModel, ...], after: tuple[FoundModel, ...]
) -> None:
    old = {model.name: model for model in before}
    new = {model.name: model for model in after}
    _log.info(
        "models_discovered",
        target=target,
        added=sorted(new.keys() - old.keys()),
        removed=sorted(old.keys() - new.keys()),
        reloaded=sorted(n for n in new.keys() & old.keys() if new[n] != old[n]),
    )
