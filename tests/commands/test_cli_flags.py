"""Every flag can come from a TRITONWATCH_… environment variable; the command line wins."""

from __future__ import annotations

import subprocess

import pytest

from support import TRITONWATCH
from tritonwatch.commands.cli import build_parser
from tritonwatch.common.cli_flags import env_name

pytestmark = pytest.mark.real


def test_env_name_follows_the_flag() -> None:
    """Each flag's environment variable is TRITONWATCH_ and its name in upper snake case."""
    assert env_name("--log-level") == "TRITONWATCH_LOG_LEVEL"
    assert env_name("--config") == "TRITONWATCH_CONFIG"


def test_environment_sets_run_flags() -> None:
    """TRITONWATCH_CONFIG, _LISTEN and _LOG_LEVEL set run's flags."""
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
    """A flag on the command line wins over its environment variable."""
    parser = build_parser({"TRITONWATCH_LISTEN": "127.0.0.1:9999"})
    args = parser.parse_args(["run", "--config", "c.yaml", "--listen", "127.0.0.1:1"])
    assert args.listen == "127.0.0.1:1"


def test_repeatable_url_flag_reads_comma_separated_env_and_the_command_line_replaces_it() -> None:
    """``TRITONWATCH_URL`` holds several servers; ``--url`` on the command line wins whole."""
    parser = build_parser({"TRITONWATCH_URL": "http://a:8000, grpc://b:8001"})
    assert parser.parse_args(["run"]).url == ["http://a:8000", "grpc://b:8001"]
    args = parser.parse_args(["run", "--url", "http://c:1", "--url", "http://d:2"])
    assert args.url == ["http://c:1", "http://d:2"]
    assert build_parser({}).parse_args(["run"]).url == []


def test_discovery_flags_come_from_the_environment() -> None:
    """``run --url`` without a file is configured by its environment in a container."""
    parser = build_parser(
        {
            "TRITONWATCH_MODELS_INCLUDE": "^bert",
            "TRITONWATCH_MODEL_REFRESH_INTERVAL": "10s",
            "TRITONWATCH_ALERTMANAGER_URL": "http://am:9093",
            "TRITONWATCH_DRY_RUN": "yes",
        }
    )
    args = parser.parse_args(["run", "--url", "http://a:8000"])
    assert (args.models_include, args.model_refresh_interval) == ("^bert", "10s")
    assert (args.alertmanager_url, args.dry_run) == ("http://am:9093", True)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--url", "http://a:1", "--models-include", "("],
         "tritonwatch run: --models-include: is not a valid regular expression (missing ), "
         "unterminated subpattern at position 0), got: '('"),
        (["--url", "tcp://a:1"],
         "tritonwatch run: --url: must be a URL starting with http://, https://, grpc:// or "
         "grpcs://, got: 'tcp://a:1'"),
        (["--url", "http://a:1", "--model-refresh-interval", "often"],
         "tritonwatch run: --model-refresh-interval: must be a duration like 500ms, 2s, 5m, "
         "1h or 1h30m, got: 'often'"),
        (["--config", "x.yaml", "--url", "http://a:1"],
         "tritonwatch run: --url: cannot be used with --config"),
        (["--config", "x.yaml", "--models-include", "a"],
         "tritonwatch run: --models-include: is for --url; with --config, set it in the file"),
        ([], "tritonwatch run: give --url URL (a Triton server) or --config FILE"),
    ],
)  # fmt: skip
def test_bad_run_flags_name_the_flag_and_value_and_exit_2(flags: list[str], message: str) -> None:
    """A bad ``--url``-mode value is reported like a config error: flag, value, exit 2."""
    result = subprocess.run(
        [TRITONWATCH, "run", *flags], capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stderr) == (2, message + "\n")


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
    """run --help names each flag's environment variable."""
    help_text = subprocess.run(
        [TRITONWATCH, "run", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for variable in ("TRITONWATCH_CONFIG", "TRITONWATCH_LISTEN", "TRITONWATCH_LOG_FORMAT"):
        assert variable in help_text
