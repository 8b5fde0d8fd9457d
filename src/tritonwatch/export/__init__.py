"""Outputs: the Prometheus exporter, the status page, alerts and their notifiers.

Collectors read records, boards and verdicts and never a source; the exporter's HTTP
server, the renderer of ``/metrics``, the status page and its charts, ``/health``, the
alert board with its Alertmanager and webhook queues, and the sweep's report.
"""
