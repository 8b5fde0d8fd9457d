"""The sweep: on-demand load at rising concurrency or rate, measured as perf_analyzer
measures (``tritonwatch sweep``, ``tune``, the scheduled sweeps).

Its workers generate closed- or open-loop load on the wire code, in this process or in
child processes; the stream sweep times streams as the streaming canary does. It
measures only (``SweepSteps``); whoever ran it judges.
"""
