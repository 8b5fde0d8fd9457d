"""The hand-written protocol code, in one bounded room.

HTTP/1.1, HTTP/2 framing, KServe protobuf, tensor datatypes and server-sent events:
written here because a measured goal (CPU, RSS, accuracy) needed them, and held to the
library each replaces by tests. It imports the standard library and ``hpack`` only,
and knows nothing of canaries or configs (an import contract says so).
"""
