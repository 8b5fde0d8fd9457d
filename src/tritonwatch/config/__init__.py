"""Configuration: the YAML schema, friendly units and error messages, and the loader."""

from tritonwatch.config.canary_schema import CanaryConfig
from tritonwatch.config.errors import ConfigError, Problem
from tritonwatch.config.loader import load_config, parse_config
from tritonwatch.config.schema import Config, TargetConfig, WatchedModel, merge_overrides
from tritonwatch.config.slo_schema import SLOConfig

__all__ = [
    "CanaryConfig",
    "Config",
    "ConfigError",
    "Problem",
    "SLOConfig",
    "TargetConfig",
    "WatchedModel",
    "load_config",
    "merge_overrides",
    "parse_config",
]
