"""KServe v2 messages for a model: its request built from its metadata and config
(perf_analyzer's job), encoded as HTTP binary or JSON tensors and gRPC messages, its
answers and its streams decoded, a server's refusal as an error.

Shared by the canary, the sweep, model discovery, ``tune`` and ``run --dry-run``; the
byte-level protocols under them are ``wire/``'s.
"""
