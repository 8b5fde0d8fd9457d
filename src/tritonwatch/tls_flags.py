"""``--ca-file``, ``--cert-file``, ``--key-file`` for the commands that reach Triton
directly (``sweep``, ``tune``): the same TLS settings a target's ``tls`` section gives
the daemon. Paths only, never key material, so nothing secret shows in a process list;
each flag also reads ``TRITONWATCH_CA_FILE`` etc. like every other flag.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tritonwatch.cli_flags import add_flag
from tritonwatch.client_tls import ClientTLS


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--ca-file", type=Path, default=None,
             help="CA that signed the server certificate (https://, grpcs://)")  # fmt: skip
    add_flag(parser, "--cert-file", type=Path, default=None, help="client certificate (mTLS)")
    add_flag(parser, "--key-file", type=Path, default=None, help="client certificate's key")


def tls_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the TLS flags (None when they are usable)."""
    if (args.cert_file is None) != (args.key_file is None):
        given, missing = ("--cert-file", "--key-file") if args.key_file is None else (
            "--key-file", "--cert-file")  # fmt: skip
        return f"{missing} is required with {given}"
    for flag, path in (("--ca-file", args.ca_file), ("--cert-file", args.cert_file),
                       ("--key-file", args.key_file)):  # fmt: skip
        if path is not None and not path.is_file():
            return f"{flag}: no such file, got: {str(path)!r}"
    return None


def tls_from(args: argparse.Namespace) -> ClientTLS | None:
    """The TLS settings the flags describe (None when none was given)."""
    if args.ca_file is None and args.cert_file is None:
        return None
    return ClientTLS(args.ca_file, args.cert_file, args.key_file)
