"""Probes: the canary, the sweep runner and the readiness check (tritonclient and HTTP)."""
