"""The daemon at run time.

Its job plan, evaluation of the rules (findings), SLO tracking and store, the boards,
model discovery and the fleet: what ``tritonwatch run`` wires together. It imports the
sources, judgement and outputs; only ``commands`` imports it.
"""
