"""A config from ``tritonwatch run --url URL …`` alone: no file needed for a first look.

Each ``--url`` becomes a target named by its ``host:port`` that discovers every READY
model (``--models-include``/``--models-exclude`` filter them), with the default
canary, SLOs and advisor. The document built goes through the same validation as a
file, and a bad value is reported under the flag that gave it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from tritonwatch.config.checks import cross_field_problems
from tritonwatch.config.errors import ConfigError, Problem, problems_from_validation
from tritonwatch.config.schema import Config

SOURCE = "tritonwatch run"

_FLAG_OF_FIELD = (
    (".metrics_url", "--metrics-url"),
    (".models.include", "--models-include"),
    (".models.exclude", "--models-exclude"),
    ("discovery.model_refresh_interval", "--model-refresh-interval"),
    ("discovery.max_models_per_target", "--max-models-per-target"),
    ("alerting.alertmanager_url", "--alertmanager-url"),
    ("targets", "--url"),  # the URL itself, or a duplicate target name (the same URL twice)
)


@dataclass(frozen=True)
class UrlFlags:
    """The flags of ``run`` that describe targets when there is no config file."""

    urls: Sequence[str]
    metrics_urls: Sequence[str] = ()
    alertmanager_url: str | None = None
    include: str | None = None
    exclude: str | None = None
    model_refresh_interval: str | None = None
    max_models_per_target: str | None = None


def target_name(url: str) -> str:
    """``http://10.0.0.5:8000/`` → ``10.0.0.5:8000``: what the target's series carry."""
    parts = urlsplit(url)
    return parts.netloc or url


def document_from_flags(flags: UrlFlags) -> dict[str, Any]:
    """The config document the flags describe (not validated yet)."""
    selection = {k: v for k, v in (("include", flags.include), ("exclude", flags.exclude)) if v}
    targets = []
    for index, url in enumerate(flags.urls):
        target: dict[str, Any] = {"name": target_name(url), "url": url, "models": selection}
        if index < len(flags.metrics_urls):
            target["metrics_url"] = flags.metrics_urls[index]
        targets.append(target)
    document: dict[str, Any] = {"targets": targets}
    discovery = {
        key: value
        for key, value in (
            ("model_refresh_interval", flags.model_refresh_interval),
            ("max_models_per_target", flags.max_models_per_target),
        )
        if value is not None
    }
    if discovery:
        document["discovery"] = discovery
    if flags.alertmanager_url:
        document["alerting"] = {"alertmanager_url": flags.alertmanager_url}
    return document


def config_from_flags(flags: UrlFlags) -> Config:
    """The validated config for ``run --url``.

    Raises:
        ConfigError: naming the flag and the value (source ``tritonwatch run``).
    """
    if flags.metrics_urls and len(flags.metrics_urls) != len(flags.urls):
        raise ConfigError(
            SOURCE,
            [
                Problem(
                    "--metrics-url",
                    f"give it once per --url ({len(flags.urls)}), in the same order, or not at all",
                    list(flags.metrics_urls),
                )
            ],
        )
    try:
        config = Config.model_validate(document_from_flags(flags))
    except ValidationError as error:
        raise ConfigError(SOURCE, _as_flags(problems_from_validation(error, Config))) from None
    problems = cross_field_problems(config)
    if problems:
        raise ConfigError(SOURCE, _as_flags(problems))
    return config


def _as_flags(problems: Sequence[Problem]) -> list[Problem]:
    return [Problem(_flag_for(p.path), p.message, p.value) for p in problems]


def _flag_for(path: str) -> str:
    for fragment, flag in _FLAG_OF_FIELD:
        if fragment in path:
            return flag
    return path
