"""The command line: argument parsing and each command's plan.

``run``, ``sweep``, ``tune``, ``rules``, ``demo`` and the rest; above the runtime, which
owns the process once a command starts it.
"""
