"""The locked stores: one writer each, readers take snapshots.

The canary and stream series, the readiness board, the scheduler's job health and the
canary liveness judgement read from them. They import only ``records`` and ``common``.
"""
