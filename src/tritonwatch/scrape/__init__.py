"""Scrapers: Triton's /metrics text and rates between scrapes, NVML on this host.

``triton_families`` is the table of Triton's ``nv_*`` families, ``triton_text`` reads
a page into a record, ``triton_deltas`` turns two records into rates, and
``nvml_collector`` (with ``nvml_fake`` for hosts without a GPU) samples local GPUs,
which ``gpu_metrics`` exports.
"""
