"""Fleet mode: targets from Prometheus ``file_sd`` files, split across replicas.

When one daemon is not enough, run one per GPU node (each watching its local
Triton), or N replicas with ``--shard-index I --shard-count N``: each target goes
to exactly one replica, chosen by a hash of its name, so replicas need no
coordination and a target moves only when the shard count changes. The models
discovered on a target (:mod:`tritonwatch.runtime.model_discovery`) go with it: only the
replica that owns a target reads its repository index.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tritonwatch.common.logs import get_logger
from tritonwatch.config.errors import ConfigError
from tritonwatch.config.schema import Config, DiscoveryConfig, TargetConfig
from tritonwatch.config.strict_yaml import read_yaml

_log = get_logger("discovery")


@dataclass(frozen=True, slots=True)
class Shard:
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(
                f"--shard-index must be in [0, --shard-count), got: {self.index} of {self.count}"
            )

    def owns(self, target_name: str) -> bool:
        digest = hashlib.sha256(target_name.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


def discovery_files(discovery: DiscoveryConfig, base: Path) -> list[Path]:
    """Every file the patterns match, sorted (a stable order for stable names)."""
    found: set[Path] = set()
    for pattern in discovery.files:
        full = Path(pattern) if Path(pattern).is_absolute() else base / pattern
        root = Path(full.anchor)
        found.update(root.glob(str(full.relative_to(root))))
    return sorted(found)


def _entries(path: Path) -> list[Any]:
    """The file's groups, read with the config's YAML rules (a key written twice is an
    error, not the last one winning)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else read_yaml(text, str(path))
    if not isinstance(data, list):
        raise ValueError("a file_sd file holds a list of {targets, labels} groups")
    return data


def _group_problem(group: object) -> str | None:
    """Why one group of a file_sd file cannot be read, or None when it can."""
    if not isinstance(group, dict):
        return f"a group is a mapping of targets and labels, not {type(group).__name__}"
    if not isinstance(group.get("labels") or {}, dict):
        return "labels is a mapping of names to values"
    if not isinstance(group.get("targets") or [], list):
        return "targets is a list of host:port addresses"
    return None


def _target(address: str, labels: dict[str, str], name: str) -> TargetConfig:
    protocol = labels.get("protocol", "http")
    scheme = labels.get("__scheme__", "http")
    if protocol == "grpc":
        scheme = "grpcs" if scheme == "https" else "grpc"
    document: dict[str, Any] = {"name": name, "url": f"{scheme}://{address}"}
    if "models" in labels:  # without the label, every READY model is discovered
        models = [m.strip() for m in labels["models"].split(",") if m.strip()]
        document["models"] = [{"name": model} for model in models]
    if "metrics_url" in labels:
        document["metrics_url"] = labels["metrics_url"]
    if "service" in labels:
        document["service"] = labels["service"]
    return TargetConfig.model_validate(document)


def discovered_targets(discovery: DiscoveryConfig, base: Path) -> list[TargetConfig]:
    """Targets described by the discovery files; bad files or entries are logged and
    skipped (one broken file must not take the fleet's other targets down)."""
    targets: list[TargetConfig] = []
    for path in discovery_files(discovery, base):
        try:
            groups = _entries(path)
        except (OSError, ValueError, ConfigError) as error:
            _log.error("discovery_file_unreadable", file=str(path), error=str(error)[:300])
            continue
        for index, group in enumerate(groups):
            problem = _group_problem(group)
            if problem is not None:
                _log.error("discovery_entry_invalid", file=str(path), group=index, error=problem)
                continue
            labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
            addresses = [str(a) for a in group.get("targets") or []]
            for address in addresses:
                name = labels.get("name", address)
                if "name" in labels and len(addresses) > 1:
                    name = f"{labels['name']}-{address}"
                try:
                    targets.append(_target(address, labels, name))
                except ValidationError as error:
                    _log.error(
                        "discovery_entry_invalid",
                        file=str(path),
                        group=index,
                        target=address,
                        error=str(error).splitlines()[0],
                    )
    return targets


def effective_config(config: Config, base: Path, shard: Shard) -> Config:
    """``config`` with the discovered targets added (static ones win a name clash) and
    only the targets this replica owns kept."""
    static = {target.name for target in config.targets}
    discovered = []
    for target in discovered_targets(config.discovery, base):
        if target.name in static:
            _log.warning("discovery_target_shadowed", target=target.name)
            continue
        static.add(target.name)
        discovered.append(target)
    owned = tuple(t for t in (*config.targets, *discovered) if shard.owns(t.name))
    return config.model_copy(update={"targets": owned})
