"""Fleet discovery files are read with the config's YAML rules, and a malformed group
is logged and skipped like a malformed file, never raised past the per-file handling."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from tritonwatch.config import parse_config
from tritonwatch.runtime.fleet import discovered_targets


def _discover(folder: Path) -> tuple[list[str], list[dict[str, object]]]:
    config = parse_config("discovery: {files: ['*.yaml']}\n", "c.yaml")
    with capture_logs() as logs:
        targets = discovered_targets(config.discovery, folder)
    return [target.name for target in targets], logs


def test_a_key_written_twice_refuses_the_file_instead_of_keeping_the_last(tmp_path: Path) -> None:
    """Fails if fleet files go back to yaml.safe_load, which keeps the second `labels`
    silently (here: a target on the wrong protocol)."""
    (tmp_path / "twice.yaml").write_text(
        "- targets: ['127.0.0.1:8001']\n  labels: {protocol: grpc}\n  labels: {protocol: http}\n"
    )
    names, logs = _discover(tmp_path)
    assert names == []
    assert [log["event"] for log in logs] == ["discovery_file_unreadable"]
    assert "found duplicate key 'labels'" in str(logs[0]["error"])
    assert "line 3, column 3" in str(logs[0]["error"])


def test_groups_that_are_not_mappings_are_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    """Fails if a group that is a string, or has labels or targets of the wrong shape,
    raises (AttributeError) out of discovery, or takes the file's good groups with it."""
    (tmp_path / "mixed.yaml").write_text(
        "- just a string\n"
        "- {targets: ['127.0.0.1:8002'], labels: [not, a, mapping]}\n"
        "- {targets: '127.0.0.1:8003'}\n"
        "- {targets: ['127.0.0.1:8004'], labels: {models: ok}}\n"
    )
    names, logs = _discover(tmp_path)
    assert names == ["127.0.0.1:8004"]
    assert [(log["event"], log["group"]) for log in logs] == [
        ("discovery_entry_invalid", 0),
        ("discovery_entry_invalid", 1),
        ("discovery_entry_invalid", 2),
    ]
    assert "not str" in str(logs[0]["error"])
