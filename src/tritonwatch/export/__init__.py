"""Outputs: the Prometheus exporter (collectors and HTTP server) and, later, alerts and pages."""
