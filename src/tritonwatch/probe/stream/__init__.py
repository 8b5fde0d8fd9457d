"""The streaming canary: time to first token and between tokens."""
