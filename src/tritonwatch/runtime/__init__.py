"""The daemon at run time.

Its job plan, the evaluator (the rules' findings to outputs), SLO tracking and store, the boards,
model discovery and the fleet: what ``tritonwatch run`` wires together. It imports the
sources, judgement and outputs; only ``commands`` imports it.
"""
