"""The daemon at run time: what ``tritonwatch run`` wires together, and its process.

Its job plan, the evaluator (the rules' findings to outputs), SLO tracking and store, the boards,
model discovery, the fleet, and the process (signals, reloads, a bounded exit). It imports the
sources, judgement and outputs; only ``commands`` imports it.
"""
