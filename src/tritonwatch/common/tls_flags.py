"""``--ca-file``, ``--cert-file``, ``--key-file`` for the commands that reach Triton
directly (``sweep``, ``tune``): the same TLS settings a target's ``tls`` section gives
the daemon. Paths only, never key material, so nothing secret shows in a process list;
each flag also reads ``TRITONWATCH_CA_FILE`` etc. like every other flag.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tritonwatch.common.cli_flags import add_flag
from tritonwatch.common.client_tls import ClientTLS


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--ca-file",
        type=Path,
        default=None,
        help="CA that signed the server certificate (https://, grpcs://)",
    )
    add_flag(parser, "--cert-file", type=Path, default=None, help="client certificate (mTLS)")
    add_flag(parser, "--key-file", type=Path, default=None, help="client certificate's key")


def tls_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the TLS flags (None when they are usable): the first of
    :meth:`ClientTLS.file_problems`, in the flags' names."""
    settings = ClientTLS(args.ca_file, args.cert_file, args.key_file)
    problem = next(settings.file_problems(), None)
    if problem is None:
        return None
    flag = _flag(problem.field)
    if problem.not_found is not None:
        return f"{flag}: no such file, got: {str(problem.not_found)!r}"
    return f"{flag} is required with {_flag(problem.given_without_it or '')}"


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def tls_from(args: argparse.Namespace) -> ClientTLS | None:
    """The TLS settings the flags describe (None when none was given)."""
    if args.ca_file is None and args.cert_file is None:
        return None
    return ClientTLS(args.ca_file, args.cert_file, args.key_file)
