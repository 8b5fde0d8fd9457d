"""The ``tritonwatch`` command line: run, check-config, simulate, demo.

Every flag also reads a ``TRITONWATCH_…`` environment variable (see
:mod:`tritonwatch.common.cli_flags`). Config problems print the same lines everywhere and
exit with status 2, never with a traceback.

The tools (``simulate``, ``sweep``, ``tune``, ``rules``) are imported only by a parser
that offers them: they pull in gRPC, ``tritonclient.http`` with gevent and ``rich``,
tens of MiB that an always-on ``tritonwatch run`` never uses (issue 15's footprint).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tritonwatch import __version__
from tritonwatch.analysis.slo import slo_specs
from tritonwatch.common.cli_flags import add_flag
from tritonwatch.common.logs import configure_logging
from tritonwatch.config import Config, ConfigError, Problem, load_config
from tritonwatch.config.checks import cross_field_problems
from tritonwatch.config.command_line import UrlFlags, config_from_flags
from tritonwatch.runtime.daemon import Daemon
from tritonwatch.runtime.fleet import Shard
from tritonwatch.runtime.process import EXIT_OK, ProcessControl

EXIT_CONFIG_ERROR = 2
CORE_COMMANDS = ("run", "check-config", "demo")
"""The commands :func:`main` can parse without importing the tools."""


def _summary(source: str, config: Config) -> str:
    models = sum(len(target.models) for target in config.targets)
    slos = len(slo_specs(config))  # those that judge each model as far as the file tells
    discovering = sum(target.selection is not None for target in config.targets)

    def plural(count: int, noun: str) -> str:
        return f"{count} {noun}{'' if count == 1 else 's'}"

    line = (
        f"ok: {source}: {plural(len(config.targets), 'target')}, "
        f"{plural(models, 'model')}, {plural(slos, 'SLO')}"
    )
    if discovering:
        line += f"; models of {plural(discovering, 'target')} discovered at run time"
    return line


def _check_config(args: argparse.Namespace) -> int:
    if not args.file:
        print("check-config: give a FILE or set --config / TRITONWATCH_CONFIG", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        config = load_config(args.file)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG_ERROR
    from tritonwatch.commands.watch_plan import describe  # noqa: PLC0415 - only this command
    from tritonwatch.config.checks import config_warnings  # noqa: PLC0415 - only this command

    print(_summary(args.file, config))
    print("\n".join(describe(config)))
    for warning in config_warnings(config):
        print(f"warning: {warning.render(str(args.file))}", file=sys.stderr)
    return EXIT_OK


def _url_flags(args: argparse.Namespace) -> UrlFlags | None:
    """The ``--url`` flags, or None when the config comes from a file."""
    if not args.url:
        return None
    return UrlFlags(
        urls=args.url,
        metrics_urls=args.metrics_url or (),
        alertmanager_url=args.alertmanager_url,
        include=args.models_include,
        exclude=args.models_exclude,
        model_refresh_interval=args.model_refresh_interval,
        max_models_per_target=args.max_models_per_target,
    )


URL_ONLY_FLAGS = (
    "metrics_url",
    "alertmanager_url",
    "models_include",
    "models_exclude",
    "model_refresh_interval",
    "max_models_per_target",
)
"""Flags that describe targets with ``--url``; a config file says the same itself."""


def _run_config(args: argparse.Namespace) -> tuple[Path | None, Config]:
    """The config ``run`` uses: from ``--config``, or built from ``--url`` and its flags.

    Raises:
        ConfigError: the file or the flags are invalid, or both kinds were given.
    """
    flags = _url_flags(args)
    given = [name for name in URL_ONLY_FLAGS if getattr(args, name)]
    if flags is not None and args.config:
        raise ConfigError("tritonwatch run", [Problem("--url", "cannot be used with --config")])
    if flags is None and not args.config:
        raise ConfigError(
            "tritonwatch run",
            [Problem("", "give --url URL (a Triton server) or --config FILE")],
        )
    if flags is None and given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(
            "tritonwatch run", [Problem(flag, "is for --url; with --config, set it in the file")]
        )
    if flags is not None:
        config = _with_web_config_flag(config_from_flags(flags), args.web_config_file)
        return None, config
    config = _with_web_config_flag(load_config(args.config), args.web_config_file)
    return Path(args.config), config


def _dry_run(args: argparse.Namespace, config: Config, shard: Shard) -> int:
    """Prints what would be watched: asks each index and each model's metadata once.
    Logs (a server that cannot be read) go to standard error, the plan alone to stdout."""
    from tritonwatch.commands.watch_plan import dry_run  # noqa: PLC0415
    from tritonwatch.runtime.fleet import effective_config  # noqa: PLC0415

    configure_logging(args.log_format, args.log_level, stream=sys.stderr)

    sharded = effective_config(config, Path.cwd(), shard)
    print("\n".join(dry_run(sharded, config.scrape.timeout)))
    return EXIT_OK


def _with_web_config_flag(config: Config, flag: str | None) -> Config:
    """``--web-config-file`` replaces ``exporter.web_config_file`` and is checked like it.

    Raises:
        ConfigError: the web-config file is invalid or clashes with the exporter's TLS.
    """
    if not flag:
        return config
    exporter = config.exporter.model_copy(update={"web_config_file": Path(flag)})
    config = config.model_copy(update={"exporter": exporter})
    problems = [p for p in cross_field_problems(config) if p.path.startswith("exporter.")]
    if problems:
        raise ConfigError("--web-config-file", problems)
    return config


def _run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format, args.log_level)
    try:
        config_path, config = _run_config(args)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG_ERROR
    control = ProcessControl()
    control.install_signal_handlers()
    try:
        shard = Shard(args.shard_index, args.shard_count)
    except ValueError as error:
        print(f"tritonwatch run: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    if args.dry_run:
        return _dry_run(args, config, shard)
    reload = control.reload_and_wait if args.web_enable_lifecycle else None
    return control.serve(
        lambda: Daemon(
            config_path, config, listen_override=args.listen, shard=shard, lifecycle_reload=reload
        )
    )


def _demo(args: argparse.Namespace) -> int:
    from tritonwatch.commands.demo import run_demo  # noqa: PLC0415 - loads the simulator

    live = sys.stdout.isatty() and args.log_format == "auto"
    configure_logging(args.log_format, "info")
    return run_demo(args.listen, live)


def build_parser(
    environ: dict[str, str] | None = None, *, tools: bool = True
) -> argparse.ArgumentParser:
    """The full command-line parser; ``environ`` replaces ``os.environ`` for flag defaults.

    ``tools=False`` leaves the tool commands out (and their imports): :func:`main` asks
    for that when the command line is one of :data:`CORE_COMMANDS`, which parse the same
    either way.
    """
    parser = argparse.ArgumentParser(
        prog="tritonwatch",
        description="Keeps Triton Inference Server deployments inside their latency budget.",
    )
    parser.add_argument("--version", action="version", version=f"tritonwatch {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the daemon")
    add_flag(run, "--config", environ=environ, help="config file (YAML); or give --url")
    add_flag(
        run,
        "--url",
        environ=environ,
        action="append",
        metavar="URL",
        help="a Triton server (http://, grpc://…); repeatable; every READY model "
        "is watched with the default canary and SLOs, no config file needed",
    )
    add_flag(
        run,
        "--metrics-url",
        environ=environ,
        action="append",
        metavar="URL",
        help="with --url: its /metrics, once per --url (default: its host, port 8002)",
    )
    add_flag(run, "--alertmanager-url", environ=environ, help="with --url: where alerts go")
    add_flag(
        run,
        "--models-include",
        environ=environ,
        metavar="REGEX",
        help="with --url: watch only models whose name matches",
    )
    add_flag(
        run,
        "--models-exclude",
        environ=environ,
        metavar="REGEX",
        help="with --url: leave out models whose name matches",
    )
    add_flag(
        run,
        "--model-refresh-interval",
        environ=environ,
        metavar="DURATION",
        help="with --url: how often the model index is read again (default 1m)",
    )
    add_flag(
        run,
        "--max-models-per-target",
        environ=environ,
        metavar="N",
        help="with --url: models watched per server at most (default 100)",
    )
    add_flag(
        run,
        "--dry-run",
        environ=environ,
        action="store_true",
        default=False,
        help="print what would be watched (asks each server once) and exit",
    )
    add_flag(run, "--listen", environ=environ, help="exporter address, overrides exporter.listen")
    add_flag(
        run,
        "--web-config-file",
        environ=environ,
        help="exporter TLS/basic-auth file (exporter-toolkit format), "
        "overrides exporter.web_config_file",
    )
    add_flag(
        run,
        "--web.enable-lifecycle",
        environ=environ,
        action="store_true",
        default=False,
        dest="web_enable_lifecycle",
        help="answer POST /-/reload (a reload, as SIGHUP), as Prometheus does",
    )
    add_flag(
        run,
        "--log-format",
        environ=environ,
        choices=["auto", "json", "console"],
        default="auto",
        help="log format; auto = console on a terminal, JSON lines otherwise",
    )
    add_flag(
        run,
        "--log-level",
        environ=environ,
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="lowest level logged",
    )
    add_flag(
        run,
        "--shard-index",
        environ=environ,
        type=int,
        default=0,
        help="this replica's shard, 0 ≤ index < count (fleet mode)",
    )
    add_flag(
        run,
        "--shard-count",
        environ=environ,
        type=int,
        default=1,
        help="replicas sharing the targets; each goes to one, by name hash",
    )
    run.set_defaults(handler=_run)

    check = commands.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("file", nargs="?", help="config file (default: --config)")
    add_flag(check, "--config", environ=environ, dest="config_flag", help="config file (YAML)")
    check.set_defaults(handler=_check_config)

    demo = commands.add_parser("demo", help="run the simulator and the daemon together")
    add_flag(demo, "--listen", environ=environ, default="127.0.0.1:9849", help="exporter address")
    add_flag(
        demo,
        "--log-format",
        environ=environ,
        choices=["auto", "json", "console"],
        default="auto",
        help="log format; auto = console on a terminal, JSON lines otherwise",
    )
    demo.set_defaults(handler=_demo)

    if tools:
        _register_tools(commands)
    return parser


def _register_tools(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``simulate``, ``sweep``, ``tune``, ``rules``: imported here, on demand (heavy)."""
    from tritonwatch.commands import sweep_cli  # noqa: PLC0415 - heavy; only for the tools
    from tritonwatch.commands.rules import cli as rules_cli  # noqa: PLC0415
    from tritonwatch.commands.tune import cli as tune_cli  # noqa: PLC0415
    from tritonwatch.sim import cli as simulate  # noqa: PLC0415

    simulate.register(commands)
    sweep_cli.register(commands)
    tune_cli.register(commands)
    rules_cli.register(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tritonwatch`` console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    core = bool(words) and words[0] in CORE_COMMANDS
    args = build_parser(tools=not core).parse_args(words)
    if args.command == "check-config":
        args.file = args.file or args.config_flag
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
