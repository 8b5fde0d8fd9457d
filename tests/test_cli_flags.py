"""Every flag can come from a TRITONWATCH_… environment variable; the command line wins."""

from __future__ import annotations

import subprocess

import pytest

from support import TRITONWATCH
from tritonwatch.cli import build_parser
from tritonwatch.cli_flags import env_name


def test_env_name_follows_the_flag() -> None:
    assert env_name("--log-level") == "TRITONWATCH_LOG_LEVEL"
    assert env_name("--config") == "TRITONWATCH_CONFIG"


def test_environment_sets_run_flags() -> None:
    parser = build_parser(
        {
            "TRITONWATCH_CONFIG": "/etc/tw.yaml",
            "TRITONWATCH_LISTEN": "127.0.0.1:9999",
            "TRITONWATCH_LOG_LEVEL": "debug",
        }
    )
    args = parser.parse_args(["run"])
    assert (args.config, args.listen, args.log_level) == ("/etc/tw.yaml", "127.0.0.1:9999", "debug")


def test_command_line_wins_over_environment() -> None:
    parser = build_parser({"TRITONWATCH_LISTEN": "127.0.0.1:9999"})
    args = parser.parse_args(["run", "--config", "c.yaml", "--listen", "127.0.0.1:1"])
    assert args.listen == "127.0.0.1:1"


def test_environment_values_are_validated_like_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse checks ``choices`` only on the command line; env values get the same check."""
    with pytest.raises(SystemExit) as caught:
        build_parser({"TRITONWATCH_LOG_LEVEL": "loud"})
    assert caught.value.code == 2
    assert (
        "TRITONWATCH_LOG_LEVEL must be one of debug, info, warning, error, got: 'loud'"
        in capsys.readouterr().err
    )


def test_every_flag_documents_its_environment_variable() -> None:
    help_text = subprocess.run(
        [TRITONWATCH, "run", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for variable in ("TRITONWATCH_CONFIG", "TRITONWATCH_LISTEN", "TRITONWATCH_LOG_FORMAT"):
        assert variable in help_text
