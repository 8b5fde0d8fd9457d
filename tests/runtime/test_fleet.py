"""Fleet mode: file_sd discovery, re-reading on change, and deterministic sharding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from support import http_get, sample_value, wait_until
from tritonwatch.config import load_config, parse_config
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.runtime.fleet import Shard, discovered_targets, effective_config

pytestmark = pytest.mark.real


def _sd(path: Path, groups: list[dict[str, object]]) -> None:
    path.write_text(json.dumps(groups))


def test_file_sd_groups_become_targets(tmp_path: Path) -> None:
    """Breaks if file_sd groups stop becoming targets with their models, scheme, name, URLs."""
    _sd(tmp_path / "a.json", [
        {"targets": ["127.0.0.1:8000", "127.0.0.1:9000"], "labels": {"models": "simple, resnet50"}},
        {"targets": ["127.0.0.1:8001"], "labels": {"models": "bert", "protocol": "grpc", "name": "grpc-a"}},
    ])  # fmt: skip
    (tmp_path / "b.yaml").write_text(
        "- targets: ['127.0.0.1:7000']\n  labels: {models: m, __scheme__: https,"
        " metrics_url: 'https://127.0.0.1:7002/metrics'}\n"
    )
    config = parse_config("discovery: {files: ['*.json', '*.yaml']}\n", "c.yaml")
    targets = discovered_targets(config.discovery, tmp_path)
    assert [(t.name, t.url, [m.name for m in t.models]) for t in targets] == [
        ("127.0.0.1:8000", "http://127.0.0.1:8000", ["simple", "resnet50"]),
        ("127.0.0.1:9000", "http://127.0.0.1:9000", ["simple", "resnet50"]),
        ("grpc-a", "grpc://127.0.0.1:8001", ["bert"]),
        ("127.0.0.1:7000", "https://127.0.0.1:7000", ["m"]),
    ]
    assert targets[3].effective_metrics_url == "https://127.0.0.1:7002/metrics"


def test_a_file_sd_service_label_groups_targets_for_the_desired_replicas(tmp_path: Path) -> None:
    """Breaks if the ``service`` label does not become the targets' service (the desired
    replicas' grouping), or a target without it is not its own service."""
    groups: list[dict[str, object]] = [
        {"targets": ["127.0.0.1:8000", "127.0.0.1:8001"], "labels": {"service": "triton"}},
        {"targets": ["127.0.0.1:9000"], "labels": {}},
    ]
    _sd(tmp_path / "a.json", groups)
    config = parse_config("discovery: {files: ['*.json']}\n", "c.yaml")
    targets = discovered_targets(config.discovery, tmp_path)
    assert [t.service_name for t in targets] == ["triton", "triton", "127.0.0.1:9000"]


def test_broken_files_and_entries_are_logged_and_skipped(tmp_path: Path) -> None:
    """Breaks if a broken file or entry stops discovery, or is skipped without a log line."""
    (tmp_path / "bad.json").write_text("{not json")
    _sd(tmp_path / "partly.json", [
        {"targets": ["127.0.0.1:8000"], "labels": {"models": " , "}},  # an empty list
        {"targets": ["127.0.0.1:8001"], "labels": {"models": "ok"}},
    ])  # fmt: skip
    config = parse_config("discovery: {files: ['*.json']}\n", "c.yaml")
    with capture_logs() as logs:
        targets = discovered_targets(config.discovery, tmp_path)
    assert [t.name for t in targets] == ["127.0.0.1:8001"]
    assert [log["event"] for log in logs] == [
        "discovery_file_unreadable",
        "discovery_entry_invalid",
    ]


def test_file_sd_target_without_models_label_discovers_every_model(tmp_path: Path) -> None:
    """Without a ``models`` label the target discovers its models (else it would be refused)."""
    _sd(tmp_path / "sd.json", [{"targets": ["127.0.0.1:8000"], "labels": {}}])
    config = parse_config("discovery: {files: ['*.json']}\n", "c.yaml")
    (target,) = discovered_targets(config.discovery, tmp_path)
    assert target.selection is not None
    assert target.models == ()


def test_shards_partition_the_targets_exactly_and_spread() -> None:
    """Breaks if a target is owned by no replica or by two, or all pile onto one."""
    names = [f"triton-{i}" for i in range(200)]
    shards = [Shard(i, 3) for i in range(3)]
    owners = [[s.index for s in shards if s.owns(name)] for name in names]
    assert all(len(o) == 1 for o in owners)  # each target on exactly one replica
    counts = [sum(1 for o in owners if o == [i]) for i in range(3)]
    assert sum(counts) == 200
    assert min(counts) > 40  # and spread, not piled on one
    with pytest.raises(ValueError, match="--shard-index"):
        Shard(3, 3)


# The first 8 bytes of each name's SHA-256, big-endian, modulo the shard count: worked
# out once with coreutils (``printf %s triton-0 | sha256sum`` → 7f963da579d421c5…).
# Every replica, on every host and Python, must agree on these.
EXPECTED_OWNERS = {
    "triton-0": (1, 1),  # 7f963da579d421c5
    "triton-1": (0, 0),  # 5a040051b527b902
    "triton-2": (0, 0),  # 637d54312b161e52
    "triton-3": (2, 1),  # da9ebf8f71d690d5
    "triton-4": (1, 0),  # 094f2f2acf62bedc
    "triton-5": (2, 0),  # bada12b2b5fe8cea
    "triton-6": (0, 0),  # 30de03b4f41614d4
    "triton-7": (0, 0),  # 068385ef492d866a
    "gpu-node-a:8000": (2, 0),  # 86642608a31e4bde
    "127.0.0.1:8001": (0, 1),  # d512c4e7211fade9
}
"""Name → (owner among 3 replicas, owner among 2)."""


def _owner(name: str, count: int) -> int:
    """The one replica of ``count`` that owns ``name``."""
    (index,) = [i for i in range(count) if Shard(i, count).owns(name)]
    return index


def test_shard_owners_are_the_documented_hash_of_the_name() -> None:
    """Breaks if ownership stops being SHA-256 of the name (e.g. Python's per-process
    ``hash()``): replicas would then disagree and targets go unwatched or twice."""
    assert {n: (_owner(n, 3), _owner(n, 2)) for n in EXPECTED_OWNERS} == EXPECTED_OWNERS


@pytest.mark.parametrize("hash_seed", ["0", "12345"])
def test_shard_owners_are_the_same_in_a_fresh_process_with_another_hash_seed(
    hash_seed: str,
) -> None:
    """Breaks if a replica started with another PYTHONHASHSEED would pick other targets."""
    script = (
        "import json, sys\n"
        "from tritonwatch.runtime.fleet import Shard\n"
        "names = json.loads(sys.argv[1])\n"
        "print(json.dumps({n: [next(i for i in range(c) if Shard(i, c).owns(n))"
        " for c in (3, 2)] for n in names}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    run = subprocess.run(
        [sys.executable, "-c", script, json.dumps(list(EXPECTED_OWNERS))],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {n: list(o) for n, o in EXPECTED_OWNERS.items()}


def test_effective_config_merges_static_first_and_keeps_only_owned(tmp_path: Path) -> None:
    """Breaks if a static target stops shadowing a discovered one, or shards lose or share one."""
    _sd(tmp_path / "t.json", [{"targets": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                               "labels": {"models": "m", "name": "static"}}])  # fmt: skip
    config = parse_config(
        "discovery: {files: ['t.json']}\n"
        "targets: [{name: static-127.0.0.1:1, url: 'http://127.0.0.1:9', models: [{name: x}]}]\n",
        "c.yaml",
    )
    every = effective_config(config, tmp_path, Shard())
    assert [t.name for t in every.targets] == [
        "static-127.0.0.1:1", "static-127.0.0.1:2", "static-127.0.0.1:3",
    ]  # fmt: skip
    assert every.targets[0].url == "http://127.0.0.1:9"  # the static target shadows the file's
    halves = [effective_config(config, tmp_path, Shard(i, 2)).targets for i in range(2)]
    assert sorted(t.name for half in halves for t in half) == sorted(t.name for t in every.targets)


def test_daemon_picks_up_a_changed_discovery_file(tmp_path: Path) -> None:
    """Breaks if the daemon misses a changed discovery file or keeps the target it dropped."""
    sd = tmp_path / "targets.json"
    _sd(sd, [{"targets": ["127.0.0.1:1"], "labels": {"models": "m", "name": "first"}}])
    path = tmp_path / "c.yaml"
    path.write_text(
        "discovery: {files: [targets.json], refresh_interval: 200ms}\n"
        "scrape: {interval: 200ms, timeout: 100ms}\ncanary: {enabled: false}\n"
    )
    daemon = Daemon(path, load_config(path), listen_override="127.0.0.1:0")
    daemon.start()
    try:

        def up(target: str) -> float | None:
            return sample_value(http_get(f"{daemon.exporter_url}/metrics")[1], "tritonwatch_up",
                                [("target", target)])  # fmt: skip

        wait_until(lambda: up("first") == 0, 10, "the first discovered target's readiness")
        _sd(sd, [{"targets": ["127.0.0.1:2"], "labels": {"models": "m", "name": "second"}}])
        wait_until(lambda: up("second") == 0, 10, "the second discovered target")
        assert up("first") is None
    finally:
        daemon.stop()
