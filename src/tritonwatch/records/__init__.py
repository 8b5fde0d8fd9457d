"""Plain records the sources publish and everything else reads.

Observations, target state, sweep and LLM records, quantiles, counters: values, no
locks, no I/O. Every layer above may import them; they import only ``config`` and
``common``.
"""
