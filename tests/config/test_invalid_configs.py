"""Each file in invalid/ holds one mistake; the loader must name file, field and value exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonwatch.config import ConfigError, load_config, parse_config

INVALID = Path(__file__).parent / "invalid"

EXPECTED = {
    "unknown_key.yaml": "scrpe: unknown key (did you mean 'scrape'?)",
    "duration_not_a_duration.yaml": (
        "scrape.interval: must be a duration like 500ms, 2s, 5m, 1h or 1h30m, got: 'fast'"
    ),
    "not_serving_for_zero.yaml": "alerting.not_serving_for: must be positive, got: '0s'",
    "scrape_timeout_not_below_interval.yaml": (
        "scrape.timeout: must be shorter than scrape.interval (10s), got: '10s'"
    ),
    "objective_above_one.yaml": (
        "targets[0].models[1].slo.latency.objective: must be between 0 and 1, both excluded, "
        "got: 1.5"
    ),
    "objective_exactly_one.yaml": (
        "slo.availability.objective: must be between 0 and 1, both excluded, got: 1"
    ),
    "threshold_zero.yaml": "targets[0].models[1].slo.latency.threshold: must be positive, got: '0ms'",
    "duplicate_target_name.yaml": (
        "targets[1].name: duplicate target name (also targets[0]), got: 'prod'"
    ),
    "duplicate_model_name.yaml": (
        "targets[0].models[2].name: duplicate model (also targets[0].models[0]), got: 'simple'"
    ),
    "url_bad_scheme.yaml": (
        "targets[0].url: must be a URL starting with http://, https://, grpc:// or grpcs://, "
        "got: 'tcp://127.0.0.1:8000'"
    ),
    "rate_not_a_rate.yaml": "canary.rate: must be a rate like 2/s, 30/m or 100/h, got: '2 per second'",
    "models_include_bad_regex.yaml": (
        "targets[0].models.include: is not a valid regular expression (missing ), "
        "unterminated subpattern at position 6), got: 'resnet('"
    ),
    "targets_empty.yaml": "targets: must list at least 1 entry (or set discovery.files), got: []",
    "max_in_flight_not_an_integer.yaml": (
        "canary.max_in_flight: input should be a valid integer, unable to parse string as an "
        "integer, got: 'many'"
    ),
    "protocol_unknown.yaml": (
        "targets[0].models[0].canary.protocol: input should be 'http', 'grpc' or 'openai', "
        "got: 'rest'"
    ),
    "yaml_duplicate_key.yaml": "line 2, column 1: invalid YAML: found duplicate key 'scrape'",
    "yaml_syntax_error.yaml": (
        "line 4, column 1: invalid YAML: expected ',' or ']', but got '<stream end>'"
    ),
    "top_level_not_a_mapping.yaml": None,  # no field path: the message follows the file name
    "tls_cert_without_key.yaml": (
        "exporter.tls_key_file: is required when exporter.tls_cert_file is set"
    ),
    "target_tls_ca_missing.yaml": (
        "targets[0].tls.ca_file: no such file, got: '/nonexistent/tritonwatch-ca.pem'"
    ),
    "target_tls_on_plain_urls.yaml": (
        "targets[0].tls: is set but none of the target's URLs is https:// or grpcs://"
    ),
    "listen_without_port.yaml": (
        "exporter.listen: must be host:port, e.g. 127.0.0.1:9849, got: '127.0.0.1'"
    ),
    "threshold_not_below_canary_timeout.yaml": (
        "targets[0].models[0].slo.latency.threshold: must be shorter than the canary timeout "
        "(1s), got: '1500ms'"
    ),
    "secret_env_unset.yaml": (
        "alerting.webhook_url: refers to environment variable TRITONWATCH_TEST_UNSET_SECRET, "
        "which is not set, got: '${TRITONWATCH_TEST_UNSET_SECRET}'"
    ),
    "secret_file_missing.yaml": (
        "alerting.bearer_token: refers to secret file /nonexistent/tritonwatch-token, which "
        "cannot be read (No such file or directory), got: '${file:/nonexistent/tritonwatch-token}'"
    ),
    "input_shape_negative.yaml": (
        "targets[0].models[0].canary.inputs.INPUT0.shape[1]: must be a positive integer, got: -1"
    ),
    "sweep_level_above_max_concurrency.yaml": (
        "sweep.concurrency: levels must not exceed max_concurrency (64), got: [1, 8, 128]"
    ),
    "string_length_zero.yaml": (
        "targets[0].models[0].canary.string_length: must be between 1 and 1048576, got: 0"
    ),
    "string_length_above_max.yaml": (
        "canary.string_length: must be between 1 and 1048576, got: 2000000"
    ),
    "string_data_empty.yaml": (
        "canary.string_data: must not be empty (leave it out for random strings), got: ''"
    ),
    "string_data_not_a_string.yaml": (
        "targets[0].models[0].canary.string_data: input should be a valid string, "
        'got: ["hello", "world"]'
    ),
    "string_data_per_input.yaml": (
        "targets[0].models[0].canary.inputs.TEXT.string_data: unknown key (allowed: shape, file)"
    ),
    "nvml_enabled_unknown.yaml": ("nvml.enabled: must be auto, true or false, got: 'sometimes'"),
    "openai_without_url.yaml": (
        "targets[0].models[0].canary.protocol: needs targets[0].openai_url, got: 'openai'"
    ),
    "openai_stream_off.yaml": "canary.stream.mode: cannot be off with protocol openai, got: 'off'",
    "openai_url_bad_scheme.yaml": (
        "targets[0].openai_url: must be a URL starting with http:// or https://, "
        "got: 'grpc://127.0.0.1:8001'"
    ),
    "stream_mode_unknown.yaml": (
        "targets[0].models[0].canary.stream.mode: must be auto, on or off, got: 'sometimes'"
    ),
    "stream_range_min_above_max.yaml": (
        'canary.stream.max_tokens: min must not be above max, got: {"min": 64, "max": 8}'
    ),
    "stream_length_not_a_length.yaml": (
        "targets[0].models[0].canary.stream.prompt_words: must be a positive integer or a "
        "mapping with min and max, got: 'many'"
    ),
    "ttft_threshold_not_below_stream_timeout.yaml": (
        "targets[0].models[0].slo.ttft.threshold: must be shorter than the stream timeout "
        "(30s), got: '45s'"
    ),
    "itl_threshold_not_below_stream_timeout.yaml": (
        "slo.itl.threshold: must be shorter than the stream timeout (1s), got: '2s'"
    ),
    "latency_threshold_not_below_stream_timeout.yaml": (
        "targets[0].models[0].slo.latency.threshold: must be shorter than the stream timeout "
        "(10s), got: '20s'"
    ),
    "input_data_missing.yaml": (
        "targets[0].models[0].canary.input_data: /nonexistent/tritonwatch-input.json: "
        "cannot read the file: No such file or directory"
    ),
    "input_data_bad_value.yaml": (
        "canary.input_data: input_data_bad_value.json, sample 1, input 'TOKENS': each element "
        "must be a number, true/false or a string, got: null"
    ),
    "web_config_unreadable.yaml": (
        "exporter.web_config_file: /nonexistent/web-config.yml: cannot read the file: "
        "No such file or directory"
    ),
}
TOP_LEVEL_MESSAGES = {
    "top_level_not_a_mapping.yaml": (
        'must be a mapping at the top level, got: [{"name": "prod", "url": "http://127.0.0.1:8000"}]'
    ),
}


def test_every_invalid_file_has_an_expected_message() -> None:
    """No bad file is left untested, and no expectation points at a missing file."""
    assert sorted(p.name for p in INVALID.glob("*.yaml")) == sorted(EXPECTED)
    assert len(EXPECTED) >= 12


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_invalid_config_message_names_file_field_and_value(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one mistake in ``name`` yields exactly the expected single-line message."""
    monkeypatch.delenv("TRITONWATCH_TEST_UNSET_SECRET", raising=False)
    monkeypatch.chdir(INVALID)  # relative file names in them (input_data) are beside them
    path = INVALID / name
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    expected = EXPECTED[name]
    if expected is None:
        assert str(caught.value) == f"{path}: {TOP_LEVEL_MESSAGES[name]}"
    else:
        assert str(caught.value) == f"{path}: {expected}"
    assert len(caught.value.problems) == 1


def test_missing_file_is_named() -> None:
    """A config path that does not exist is named in a one-line error with the OS's reason."""
    with pytest.raises(ConfigError) as caught:
        load_config("/nonexistent/tritonwatch.yaml")
    assert str(caught.value) == (
        "/nonexistent/tritonwatch.yaml: cannot read the file: No such file or directory"
    )


def test_several_mistakes_are_all_reported() -> None:
    """A user fixes every problem in one go, not one per run."""
    text = "scrape: {interval: 0s}\ntargets: [{name: a, url: ftp://x, models: [{name: m}]}]\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "two.yaml")
    assert str(caught.value).splitlines() == [
        "two.yaml: targets[0].url: must be a URL starting with http://, https://, grpc:// or "
        "grpcs://, got: 'ftp://x'",
        "two.yaml: scrape.interval: must be positive, got: '0s'",
    ]
