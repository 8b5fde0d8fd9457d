"""The sweep's load generator: pre-encoded requests on lean keep-alive connections,
spread over worker processes when one process cannot keep up."""
