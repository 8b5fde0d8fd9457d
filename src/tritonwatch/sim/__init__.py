"""A Triton-compatible simulator (``tritonwatch simulate``): HTTP, gRPC and ``/metrics``
with dynamic batching, shared simulated GPUs, scenarios and fault injection.

The in-process entry point is ``tritonwatch.sim.server.Simulator``.
"""
