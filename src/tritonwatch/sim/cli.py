"""``tritonwatch simulate``: run the Triton-compatible simulator until a signal.

Prints one line with every bound endpoint (``http=HOST:PORT grpc=HOST:PORT
metrics=HOST:PORT``) once all ports listen, so scripts can start it with port 0 and read
the ports; stops cleanly on SIGINT or SIGTERM and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import structlog

from tritonwatch.common import precise_loop
from tritonwatch.common.cli_flags import add_flag
from tritonwatch.sim.cache import parse_cache_config
from tritonwatch.sim.core import DEFAULT_METRICS_INTERVAL_S
from tritonwatch.sim.models import ModelSetError
from tritonwatch.sim.scenarios import SCENARIOS
from tritonwatch.sim.server import GrpcTLS, SimulatorOptions, SimulatorService, resolve_model_set

EXIT_USAGE = 2


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got: {value}")
    return value


def _interval_ms(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"metrics interval must be positive, got: {value}")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds the ``simulate`` subcommand (its flags also read ``TRITONWATCH_*`` variables)."""
    parser = subparsers.add_parser(
        "simulate",
        help="run a Triton-compatible simulator (HTTP, gRPC, /metrics)",
        description=__doc__,
    )
    add_flag(parser, "--host", default="127.0.0.1", help="bind address")
    add_flag(parser, "--http-port", type=_port, default=8000, help="HTTP port (0 = any free)")
    add_flag(parser, "--grpc-port", type=_port, default=8001, help="gRPC port (0 = any free)")
    add_flag(
        parser, "--metrics-port", type=_port, default=8002, help="/metrics port (0 = any free)"
    )
    add_flag(parser, "--models", default=None, help="model-set YAML (built-in models if absent)")
    add_flag(
        parser,
        "--scenario",
        default="healthy",
        choices=sorted(SCENARIOS),
        help="scenario applied to every model at start",
    )
    add_flag(parser, "--seed", type=int, default=0, help="seed of every random draw")
    add_flag(
        parser,
        "--summary-latencies",
        action="store_true",
        help="export the summary families (Triton's --metrics-config summary_latencies=true)",
    )
    add_flag(
        parser,
        "--histogram-latencies",
        action="store_true",
        help="export the first-response histogram of decoupled models "
        "(Triton's --metrics-config histogram_latencies=true)",
    )
    add_flag(
        parser,
        "--metrics-interval-ms",
        type=_interval_ms,
        default=int(DEFAULT_METRICS_INTERVAL_S * 1000),
        help="how often GPU and CPU gauges refresh (Triton's --metrics-interval-ms)",
    )
    add_flag(
        parser,
        "--model-control-mode",
        choices=["explicit", "none", "poll"],
        default="explicit",
        help="Triton's --model-control-mode: only explicit accepts repository load/unload",
    )
    add_flag(
        parser,
        "--cache-config",
        default=None,
        help="give the server a response cache, as Triton's: local,size=<bytes> "
        "(models with response_cache then answer repeated requests from it)",
    )
    add_flag(parser, "--grpc-use-ssl", action="store_true", help="serve gRPC over TLS")
    add_flag(
        parser,
        "--grpc-use-ssl-mutual",
        action="store_true",
        help="serve gRPC over TLS and require client certificates",
    )
    add_flag(parser, "--grpc-server-cert", type=Path, default=None, help="PEM certificate")
    add_flag(parser, "--grpc-server-key", type=Path, default=None, help="PEM private key")
    add_flag(
        parser,
        "--grpc-root-cert",
        type=Path,
        default=None,
        help="PEM CA that client certificates must chain to (mutual)",
    )
    parser.set_defaults(handler=run)


def _grpc_tls(args: argparse.Namespace) -> GrpcTLS | None:
    """Triton's SSL flags as the simulator's options; a missing file is a usage error."""
    if not (args.grpc_use_ssl or args.grpc_use_ssl_mutual):
        return None
    if args.grpc_server_cert is None or args.grpc_server_key is None:
        raise ValueError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    if args.grpc_use_ssl_mutual and args.grpc_root_cert is None:
        raise ValueError("--grpc-use-ssl-mutual needs --grpc-root-cert")
    for path in (args.grpc_server_cert, args.grpc_server_key, args.grpc_root_cert):
        if path is not None and not path.is_file():
            raise ValueError(f"no such file: {path}")
    return GrpcTLS(
        args.grpc_server_cert, args.grpc_server_key, args.grpc_root_cert, args.grpc_use_ssl_mutual
    )


def _configure_logging() -> None:
    """Logs to stderr at INFO unless the application configured structlog already;
    stdout stays for the endpoints line."""
    if not structlog.is_configured():
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )


def run(args: argparse.Namespace) -> int:
    """Runs the simulator until SIGINT/SIGTERM; returns the exit status."""
    _configure_logging()
    try:
        model_set = resolve_model_set(args.models)
        grpc_tls = _grpc_tls(args)
        cache_bytes = None if args.cache_config is None else parse_cache_config(args.cache_config)
    except (ModelSetError, ValueError) as error:
        print(f"tritonwatch simulate: {error}", file=sys.stderr)  # noqa: T201
        return EXIT_USAGE
    options = SimulatorOptions(
        scenario=args.scenario,
        seed=args.seed,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        summary_latencies=args.summary_latencies,
        histogram_latencies=args.histogram_latencies,
        metrics_interval_s=args.metrics_interval_ms / 1000,
        model_control_mode=args.model_control_mode,
        grpc_tls=grpc_tls,
        response_cache_bytes=cache_bytes,
    )
    service = SimulatorService(model_set, options)
    try:
        precise_loop.run(_serve(service))
    except OSError as error:
        print(f"tritonwatch simulate: cannot listen: {error}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


async def _serve(service: SimulatorService) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        endpoints = await service.start()
        print(endpoints.banner(), flush=True)  # noqa: T201
        structlog.get_logger(component="sim").info("simulator ready", endpoints=endpoints.banner())
        await stop.wait()
    finally:
        await service.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
