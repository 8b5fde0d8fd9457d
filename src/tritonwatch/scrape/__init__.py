"""Scrapers: Triton's /metrics, statistics and config APIs per target, NVML on this host.

``triton_families`` is the table of Triton's ``nv_*`` families, ``triton_text`` reads
a page into a record, ``triton_deltas`` turns two records into rates, ``triton_stats``
and ``triton_config`` read the answers of the statistics and model-config APIs, which
the model API client (``tritonwatch.triton_api``) asks over HTTP or, for a target
configured by its gRPC endpoint, over gRPC; ``/metrics`` is read with its bounded
request (``triton_api.fetch``).
``target_scraper`` runs one target's scrape cycle (with the breakdown and bottleneck
findings of ``analysis.breakdown``) into a ``target_state``, and ``collection`` keeps
one scraper per configured target. ``nvml_sampler`` (with ``nvml_fake`` for hosts
without a GPU) samples local GPUs, which ``export.gpu_metrics`` exports together with the
GPUs Triton reports.
"""
