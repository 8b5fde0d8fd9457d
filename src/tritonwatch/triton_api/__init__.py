"""One client of a server's model APIs: metadata, config, statistics, the repository.

:class:`~tritonwatch.triton_api.client.ModelApiClient` asks one server, over HTTP
(``requests``) or, for a target reachable by gRPC alone, over gRPC (``tritonclient.grpc``,
imported on first use); every answer is an
:class:`~tritonwatch.triton_api.answer.ApiAnswer` in the HTTP API's shape, whatever the
protocol. The canary, the sweep, discovery, the scrapers and ``tune`` all ask through it.
"""
