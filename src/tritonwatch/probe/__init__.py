"""Probes: the canary, the streaming canary, the sweep's load and the readiness check.

``canary`` times one model's requests end to end (sent by its own engine over the wire
code, or by ``tritonclient``); ``stream`` times tokens; ``sweep`` generates the sweep's
load; ``runner`` runs every canary of a target on one loop. They publish records only.
"""
