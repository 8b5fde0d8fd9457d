"""Log lines: JSON off a terminal, console on one, a component on every line, no secrets."""

from __future__ import annotations

import io
import json
import re

import pytest
import structlog

from tritonwatch.common.logs import REDACTOR, configure_logging, get_logger
from tritonwatch.config import parse_config


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_logging() -> object:
    yield
    REDACTOR.set_secrets([])
    structlog.reset_defaults()


def test_json_lines_when_not_a_terminal() -> None:
    """Off a terminal each line is JSON with event, component, fields, level and a UTC time."""
    stream = io.StringIO()
    configure_logging("auto", "info", stream)
    get_logger("scraper").info("scraped", target="prod", samples=12)
    record = json.loads(stream.getvalue())
    assert record["event"] == "scraped"
    assert record["component"] == "scraper"
    assert record["target"] == "prod" and record["samples"] == 12
    assert record["level"] == "info" and record["timestamp"].endswith("Z")


def test_console_on_a_terminal() -> None:
    """On a terminal lines are human-readable console text naming the component, not JSON."""
    stream = _Terminal()
    configure_logging("auto", "info", stream)
    get_logger("daemon").info("started")
    line = re.sub(r"\x1b\[[0-9;]*m", "", stream.getvalue())  # drop the colours
    assert "started" in line and "component=daemon" in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_lines_without_a_component_get_the_default() -> None:
    """A line logged without a component gets the default component, tritonwatch."""
    stream = io.StringIO()
    configure_logging("json", "info", stream)
    structlog.get_logger().info("bare")
    assert json.loads(stream.getvalue())["component"] == "tritonwatch"


def test_level_filters() -> None:
    """Lines below the configured level are not written."""
    stream = io.StringIO()
    configure_logging("json", "warning", stream)
    log = get_logger("x")
    log.info("quiet")
    log.warning("loud")
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["loud"]


def test_secret_keys_and_configured_secret_values_are_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Secret keys and configured secret values are redacted anywhere in a line, nested too."""
    monkeypatch.setenv("TW_TEST_TOKEN", "tok-9f8e7d")
    config = parse_config(
        "alerting:\n"
        "  webhook_url: https://hooks.example.invalid/services/T1/B2/xyzzy\n"
        "  bearer_token: ${TW_TEST_TOKEN}\n"
        "  basic_auth: {username: ops, password: hunter2-long}\n"
        "targets: [{name: a, url: http://127.0.0.1:8000, models: [{name: m}]}]\n",
        "s.yaml",
    )
    REDACTOR.set_secrets(config.secret_values())
    stream = io.StringIO()
    configure_logging("json", "info", stream)
    log = get_logger("notifier")
    log.error(
        "delivery_failed",
        error="POST https://hooks.example.invalid/services/T1/B2/xyzzy failed (tok-9f8e7d)",
        password="hunter2-long",
        headers={"Authorization": "Bearer tok-9f8e7d", "Accept": "json"},
        nested=["hunter2-long is the password"],
    )
    text = stream.getvalue()
    for secret in ("xyzzy", "tok-9f8e7d", "hunter2-long"):
        assert secret not in text
    record = json.loads(text)
    assert record["password"] == "[redacted]"
    assert record["headers"] == {"Authorization": "[redacted]", "Accept": "json"}
    assert record["error"] == "POST [redacted] failed ([redacted])"
    assert record["nested"] == ["[redacted] is the password"]
