"""Prometheus rules generated from the config: ``tritonwatch rules``."""
