"""Valid configs: defaults, per-model overrides, derived URLs, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonwatch.config import ConfigError, parse_config

pytestmark = pytest.mark.real

ONE_MODEL = """
targets:
  - name: prod
    url: http://127.0.0.1:8000
    models: [{name: simple}]
"""


def test_one_target_one_model_is_a_complete_config() -> None:
    """One target with one model is enough: every other setting gets its documented default."""
    config = parse_config(ONE_MODEL, "min.yaml")
    target = config.targets[0]
    model = target.models[0]
    assert config.slo_for(model).latency.threshold == 0.05
    assert config.slo_for(model).latency.objective == 0.95
    assert config.slo_for(model).availability.objective == 0.999
    assert config.slo_for(model).period == 28 * 86400
    assert config.canary_for(target, model).protocol == "http"
    assert config.scrape.interval == 15 and config.scrape.timeout == 5
    assert config.exporter.listen == "127.0.0.1:9849"
    assert config.nvml.enabled == "auto"


def test_model_overrides_only_the_fields_it_sets() -> None:
    """A model that sets the latency threshold keeps the global objective and canary rate."""
    config = parse_config(
        """
slo: {latency: {threshold: 80ms, objective: 0.99}}
canary: {rate: 4/s, timeout: 1s}
targets:
  - name: prod
    url: grpc://127.0.0.1:8001
    models:
      - {name: a, slo: {latency: {threshold: 20ms}}, canary: {protocol: http, max_in_flight: 2}}
      - {name: b}
""",
        "o.yaml",
    )
    target = config.targets[0]
    a, b = target.models
    assert config.slo_for(a).latency.threshold == pytest.approx(0.02)
    assert config.slo_for(a).latency.objective == 0.99
    assert config.slo_for(b).latency.threshold == pytest.approx(0.08)
    canary_a, canary_b = config.canary_for(target, a), config.canary_for(target, b)
    assert (canary_a.protocol, canary_a.rate, canary_a.max_in_flight, canary_a.timeout) == (
        "http",
        4.0,
        2,
        1.0,
    )
    assert (canary_b.protocol, canary_b.max_in_flight) == ("grpc", 8)


def test_string_fill_defaults_to_perf_analyzers_and_overrides_per_model() -> None:
    """BYTES settings merge like every canary field: a model's string_data keeps the global
    string_length, and a model that sets neither gets the global ones."""
    config = parse_config(
        """
canary: {string_length: 16}
targets:
  - name: prod
    url: http://127.0.0.1:8000
    models:
      - {name: a, canary: {string_data: "What is Triton?"}}
      - {name: b, canary: {string_length: 4}}
      - {name: c}
""",
        "s.yaml",
    )
    target = config.targets[0]
    a, b, c = (config.canary_for(target, m) for m in target.models)
    assert (a.string_length, a.string_data) == (16, "What is Triton?")
    assert (b.string_length, b.string_data) == (4, None)
    assert (c.string_length, c.string_data) == (16, None)
    default = parse_config(ONE_MODEL, "min.yaml")
    assert (default.canary.string_length, default.canary.string_data) == (128, None)


@pytest.mark.parametrize(
    ("url", "http", "grpc", "metrics"),
    [
        (
            "http://triton:8000",
            "http://triton:8000",
            "grpc://triton:8001",
            "http://triton:8002/metrics",
        ),
        (
            "grpcs://triton:9001",
            "https://triton:8000",
            "grpcs://triton:9001",
            "https://triton:8002/metrics",
        ),
        (
            "http://[::1]:8000/",
            "http://[::1]:8000",
            "grpc://[::1]:8001",
            "http://[::1]:8002/metrics",
        ),
    ],
)
def test_endpoints_default_to_tritons_ports_on_the_same_host(
    url: str, http: str, grpc: str, metrics: str
) -> None:
    """HTTP, gRPC and metrics URLs default to Triton's ports on the target's host, TLS kept."""
    config = parse_config(f"targets: [{{name: t, url: '{url}', models: [{{name: m}}]}}]", "u.yaml")
    target = config.targets[0]
    assert (
        target.effective_http_url,
        target.effective_grpc_url,
        target.effective_metrics_url,
    ) == (http, grpc, metrics)


def test_explicit_metrics_url_wins() -> None:
    """A target's explicit metrics_url replaces the one derived from its url."""
    config = parse_config(
        "targets: [{name: t, url: 'http://a:8000', metrics_url: 'http://b:9102/metrics', "
        "models: [{name: m}]}]",
        "m.yaml",
    )
    assert config.targets[0].effective_metrics_url == "http://b:9102/metrics"


def test_secret_from_environment_is_read_and_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ${VAR} secret is read from the environment and never shows in the config's repr."""
    monkeypatch.setenv("TW_TEST_HOOK", "https://hooks.example.invalid/T000/secret-path")
    config = parse_config(
        "alerting: {webhook_url: '${TW_TEST_HOOK}', basic_auth: {username: u, password: p4ss}}\n"
        + ONE_MODEL,
        "s.yaml",
    )
    assert config.alerting.webhook_url is not None
    assert config.alerting.webhook_url.get_secret_value().endswith("/secret-path")
    assert "secret-path" not in repr(config) and "p4ss" not in repr(config)


def test_secret_from_a_file_is_read_without_its_newline(tmp_path: Path) -> None:
    """A ${file:...} secret is read without its trailing newline and never shows in repr."""
    token = tmp_path / "token"
    token.write_text("s3cret-t0ken\n")  # as `echo ... > file` or a Kubernetes secret leaves it
    password = tmp_path / "password"
    password.write_text("p4ss")
    config = parse_config(
        f"alerting: {{bearer_token: '${{file:{token}}}', "
        f"basic_auth: {{username: u, password: '${{file:{password}}}'}}}}\n" + ONE_MODEL,
        "s.yaml",
    )
    assert config.alerting.bearer_token is not None
    assert config.alerting.bearer_token.get_secret_value() == "s3cret-t0ken"
    assert config.alerting.basic_auth is not None
    assert config.alerting.basic_auth.password.get_secret_value() == "p4ss"
    assert "s3cret" not in repr(config) and "p4ss" not in repr(config)


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"", "which is empty"), (b"\xff\xfe", "which is not UTF-8 text"),
     (b"x" * (64 * 1024 + 1), "which is larger than 64 KiB")],
)  # fmt: skip
def test_unusable_secret_files_are_named(tmp_path: Path, content: bytes, why: str) -> None:
    """An empty, non-UTF-8 or oversized secret file is refused, naming the field and file."""
    secret = tmp_path / "secret"
    secret.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        parse_config(f"alerting: {{bearer_token: '${{file:{secret}}}'}}\n" + ONE_MODEL, "s.yaml")
    assert f"alerting.bearer_token: refers to secret file {secret}, {why}" in str(raised.value)


def test_config_is_frozen() -> None:
    """A loaded config cannot be changed in place by the code that reads it."""
    config = parse_config(ONE_MODEL, "f.yaml")
    with pytest.raises(ValueError, match="frozen"):
        config.scrape.interval = 1.0  # type: ignore[misc]
