"""The sweep's load generator: concurrency levels, workers and their statistics."""
