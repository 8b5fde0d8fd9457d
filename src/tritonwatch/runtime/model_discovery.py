"""Model discovery: which models a target serves, from its repository index.

A target whose ``models:`` is a selection (or absent) is watched for every READY model
that the server's repository index lists (``POST /v2/repository/index`` with
``{"ready": true}``, or gRPC ``RepositoryIndex`` for a gRPC-only target: the model API
client, :mod:`tritonwatch.triton_api`, asks as the scrapers do), filtered by
``include``/``exclude`` and capped at ``discovery.max_models_per_target``; its
``listed`` models are always watched, with their own settings.

The daemon reads the index again every ``discovery.model_refresh_interval`` — one
request per target, however many models — and reads a model's metadata and config only
when it is new, when its row in the index changed (another version, another state), or
when the daemon hands it over as reloaded: the scrapers saw it loaded again (its
statistics or ``/metrics`` counters started over, :meth:`TritonScrapers.take_reloaded
<tritonwatch.scrape.triton_scrapers.TritonScrapers.take_reloaded>`), or its canary's
requests began to be refused (a reload with the same version and other inputs shows
nowhere in the index). When the set changes — a model loaded, unloaded, or reloaded
with other inputs, outputs or batching (so the canary builds its request again) — it
re-applies the config as a reload does: the canaries of models gone stop and their
series disappear, new ones start, a reloaded one restarts, and the others run on
untouched. A server that cannot
be read keeps the models found last, so a blip does not drop them. Reaching the cap is
logged once, when it is reached, not on every read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonwatch.common.logs import get_logger
from tritonwatch.config.schema import Config, ModelSelection, TargetConfig, WatchedModel
from tritonwatch.triton_api.answer import ApiAnswer, ApiError
from tritonwatch.triton_api.client import ModelApiClient

_log = get_logger("model_discovery")
READY = "READY"


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
    sends (see :func:`describe`). ``stamp`` is its rows in the index when it was
    described (:func:`index_stamps`); it takes no part in comparisons."""

    name: str
    signature: str = ""
    stamp: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class TargetModels:
    """What one read of a target's index found."""

    models: tuple[FoundModel, ...]
    left_out: tuple[str, ...] = ()
    """Models selected but past ``discovery.max_models_per_target``: not watched."""


class DiscoveryError(Exception):
    """The index could not be read (unreachable, refused, not JSON)."""


def parse_index(rows: list[Any]) -> list[IndexEntry]:
    """The entries of an index answer (a list of rows, as the model API client answers
    over either protocol); rows without a name are left out."""
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


def index_stamps(entries: Iterable[IndexEntry]) -> dict[str, str]:
    """Name → its rows (version and state, sorted) as one string: a model whose stamp
    changed was loaded, unloaded or reloaded as another version since."""
    rows: dict[str, list[str]] = {}
    for entry in entries:
        rows.setdefault(entry.name, []).append(f"{entry.version}:{entry.state.upper()}")
    return {name: ",".join(sorted(found)) for name, found in rows.items()}


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


def _required(answer: ApiAnswer, what: str) -> Any:
    try:
        return answer.document_or_raise()
    except ApiError as error:
        raise DiscoveryError(f"the {what}: {error}") from None


def read_index(client: ModelApiClient) -> list[IndexEntry]:
    """The READY rows of the server's repository index.

    Raises:
        DiscoveryError: the index could not be read.
    """
    return parse_index(_required(client.repository_index(ready_only=True), "repository index"))


def read_model(client: ModelApiClient, model: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The model's metadata and config (None: the server has no config API).

    Raises:
        DiscoveryError: either could not be read.
    """
    metadata = _required(client.model_metadata(model), "model metadata")
    config_answer = client.model_config(model)
    config = None if config_answer.missing_api else _required(config_answer, "model config")
    return metadata, config


def describe(client: ModelApiClient, model: str) -> bytes:
    """What the canary builds its request from (:func:`~tritonwatch.kserve.payload.input_specs`,
    the outputs it checks): the metadata, and the config's batching and inputs. A reload
    that changes these rebuilds the canary; one that changes only, say, instance counts
    (as ``tune`` does) needs nothing from discovery and leaves the canary running.

    Raises:
        DiscoveryError: the metadata or config could not be read.
    """
    metadata, config = read_model(client, model)
    request = {key: (config or {}).get(key) for key in ("max_batch_size", "input")}
    return json.dumps([metadata, request], sort_keys=True).encode()


def client_for(target: TargetConfig, timeout: float) -> ModelApiClient:
    """The target's model API client (gRPC for a gRPC target without ``http_url``, as
    the scrapers ask; HTTP otherwise), each call bounded by ``timeout``."""
    return ModelApiClient.for_target(target, timeout=timeout)


def discover(
    target: TargetConfig,
    client: ModelApiClient,
    cap: int,
    known: Mapping[str, FoundModel],
    recheck: Collection[str] = (),
) -> TargetModels:
    """The target's discovered models — the first ``cap`` by name — each with the
    signature of :func:`describe`: read for a model not in ``known``, one whose index
    rows changed since (its stamp), and those in ``recheck``; the others keep theirs, so
    a steady server costs one index request. A model whose description cannot be read
    keeps its last signature, and is read again next time.

    Raises:
        DiscoveryError: the index could not be read.
    """
    selection = target.selection or ModelSelection()
    entries = read_index(client)
    stamps = index_stamps(entries)
    names = select_names(selection, ready_names(entries))
    found = []
    for name in names[:cap]:
        previous = known.get(name)
        stamp = stamps.get(name, "")
        if previous is not None and previous.stamp == stamp and name not in recheck:
            found.append(previous)
            continue
        try:
            signature = hashlib.sha256(describe(client, name)).hexdigest()[:16]
        except DiscoveryError:
            signature, stamp = (previous.signature if previous is not None else ""), ""
        found.append(FoundModel(name, signature, stamp))
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
        self._refused: set[tuple[str, str]] = set()
        """(target, model) whose canary was refused when last read: read again once."""

    @property
    def found(self) -> Mapping[str, tuple[FoundModel, ...]]:
        return dict(self._found)

    def refresh(self, config: Config) -> bool:
        """Reads (:meth:`read`) and commits (:meth:`commit`) in one go.

        Returns:
            True when what was found differs from before (the config must be re-applied).
        """
        return self.commit(self.read(config))

    def read(
        self,
        config: Config,
        *,
        reloaded: Collection[tuple[str, str]] = (),
        refused: Collection[tuple[str, str]] = (),
    ) -> dict[str, tuple[FoundModel, ...]]:
        """Reads the index of every discovering target of ``config`` (the effective,
        sharded targets: a replica discovers only on the targets it owns) and returns
        what it found; commits nothing. A target that cannot be read keeps the models
        committed for it before.

        Args:
            reloaded: (target, model) seen loaded again since the last read: described
                again.
            refused: (target, model) whose canary's requests are refused now: each
                described again once, when it joins (not at every read while it stays).
        """
        cap = config.discovery.max_models_per_target
        committed = self._found
        recheck = set(reloaded) | (set(refused) - self._refused)
        self._refused = set(refused)
        found: dict[str, tuple[FoundModel, ...]] = {}
        for target in config.targets:
            if target.selection is None:
                continue
            previous = committed.get(target.name)
            client = client_for(target, self._timeout)
            try:
                known = {model.name: model for model in previous or ()}
                again = {model for name, model in recheck if name == target.name}
                read = discover(target, client, cap, known, again)
                found[target.name] = read.models
                self._note_cap(target.name, read, cap)
            except DiscoveryError as error:
                _log.warning("model_discovery_failed", target=target.name, error=str(error))
                if previous is not None:
                    found[target.name] = previous
            finally:
                client.close()
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
