"""What ``tritonwatch run`` imports: the heavy packages it does not use stay out.

Issue 15's footprint goal (RSS ≤ 60 MiB) is mostly import cost: ``tritonclient.http``
brings gevent, the tools bring gRPC and ``rich``, ``tritonclient.utils`` brings numpy
and ``ml_dtypes`` (16 MiB). These tests read ``sys.modules`` of a fresh interpreter, so
they hold without timing anything; a module-level import that pulls one of these back
in fails here, naming the package and the chain of our modules that imported it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tritonwatch.commands.cli import build_parser

pytestmark = pytest.mark.real

NEVER_IN_RUN = ("rich", "pygments", "matplotlib", "grpc", "tritonclient.grpc", "tritonwatch.sim.server",
                "tritonwatch.commands.tune", "tritonwatch.commands.sweep_cli")  # fmt: skip
"""Heavy packages no part of ``tritonwatch run`` uses (only the tools and the demo do)."""
SWEEP_AND_CANARY_CHAIN = ("gevent", "geventhttpclient", "tritonclient.http")
"""tritonclient.http and the gevent it pulls in: on use only, by the sweep's and tune's clients."""
LOADED_ON_USE = (
    "greenlet",
    "bcrypt",
    "tritonwatch.sweep.load_sweep",
    "tritonwatch.sweep.stream_sweep",
)
"""Loaded only when used: greenlet (structlog's deprecated threadlocal), bcrypt (basic
auth's first check), the sweep's load generators (the first scheduled sweep): ~2 MiB."""
NOT_IN_THE_HTTP_CANARY = ("numpy", "ml_dtypes", "tritonclient")
"""What the daemon with HTTP canaries never imports: they build and check tensors as bytes
(wire/datatypes.py); only sample files, gRPC, sweep and tune import these, on use."""


def _loaded_after(code: str) -> set[str]:
    """The top-level and dotted module names in ``sys.modules`` after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["tritonwatch.runtime.daemon", "tritonwatch.commands.cli"])
def test_the_daemon_imports_none_of_the_tools_heavy_packages(module: str) -> None:
    """Fails when a module-level import in the run path pulls in rich, gRPC, matplotlib
    or a tool (the simulator's server, tune, sweep's CLI) again."""
    loaded = _loaded_after(f"import {module}")
    assert sorted(name for name in NEVER_IN_RUN if name in loaded) == []


def test_parsing_run_imports_no_tool() -> None:
    """Fails when ``main`` builds the tools' parsers (and imports them) for ``run``."""
    code = (
        "import tritonwatch.commands.cli as cli\n"
        "status = cli.main(['run', '--config', '/nonexistent/c.yaml', '--log-format', 'json'])\n"
        "assert status == cli.EXIT_CONFIG_ERROR, status"
    )
    loaded = _loaded_after(code)
    assert sorted(name for name in NEVER_IN_RUN if name in loaded) == []


def test_run_parses_the_same_without_the_tools() -> None:
    """Fails when leaving the tools out changes what a ``run`` command line means."""
    argv = ["run", "--config", "c.yaml", "--listen", "127.0.0.1:1", "--log-format", "json"]
    full, core = build_parser({}).parse_args(argv), build_parser({}, tools=False).parse_args(argv)
    assert vars(full) == vars(core)


def test_the_daemon_does_not_import_gevent_or_tritonclient_http() -> None:
    """Breaks if a module-level import brings gevent back (tritonclient.http, ~5 MiB)."""
    loaded = _loaded_after("import tritonwatch.runtime.daemon")
    assert sorted(name for name in SWEEP_AND_CANARY_CHAIN if name in loaded) == []


def test_what_a_run_needs_only_on_use_is_not_imported_with_the_daemon() -> None:
    """Fails when a module-level import loads greenlet, bcrypt or the sweep's load
    generators into a daemon that has not used them yet."""
    loaded = _loaded_after("import tritonwatch.commands.cli")
    assert sorted(name for name in LOADED_ON_USE if name in loaded) == []


def test_what_is_hidden_from_structlog_still_imports_and_works_afterwards() -> None:
    """Fails when hiding greenlet from structlog's import leaves it unimportable, or
    basic auth cannot check a bcrypt hash once bcrypt is loaded on use."""
    code = (
        "import tritonwatch.commands.cli, sys\n"
        "import bcrypt, greenlet\n"
        "assert greenlet.getcurrent() is not None\n"
        "from tritonwatch.config.web_config import BasicAuthUser\n"
        "from tritonwatch.export.basic_auth import BasicAuthChecker\n"
        "hashed = bcrypt.hashpw(b'pw', bcrypt.gensalt(rounds=4))\n"
        "checker = BasicAuthChecker((BasicAuthUser(name='u', password_hash=hashed),))\n"
        "assert checker.check(b'u', b'pw') and not checker.check(b'u', b'no')\n"
    )
    assert {"greenlet", "bcrypt"} <= _loaded_after(code)


def test_json_logging_leaves_rich_out_and_console_logging_brings_it_back() -> None:
    """Fails when structlog loads rich for JSON lines, or console output loses rich's
    tracebacks (structlog's default formatter when rich is installed)."""
    code = (
        "import io, sys\n"
        "from tritonwatch.common.logs import configure_logging\n"
        "configure_logging('json', 'info', io.StringIO())\n"
        "assert 'rich' not in sys.modules, 'rich loaded for JSON logs'\n"
        "configure_logging('console', 'info', io.StringIO())\n"
        "import structlog\n"
        "formatter = structlog.dev.default_exception_formatter\n"
        "assert type(formatter).__name__ == 'RichTracebackFormatter', formatter"
    )
    assert "rich" in _loaded_after(code)


_IMPORTER_SPY = """
import sys
FORBIDDEN = {forbidden!r}
importers = {{}}


class Spy:
    \"\"\"Records, for each forbidden package, our modules on the stack when it is first found.\"\"\"

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in FORBIDDEN and top not in importers:
            frame, chain = sys._getframe(1), []
            while frame is not None:
                module = frame.f_globals.get("__name__", "")
                if module.startswith("tritonwatch") and module not in chain:
                    chain.append(module)
                frame = frame.f_back
            importers[top] = chain[::-1]
        return None


sys.meta_path.insert(0, Spy())
"""

_HTTP_CANARY = """
import tritonwatch.commands.cli
import tritonwatch.runtime.daemon
from tritonwatch.probe.canary.clients import client_for
from tritonwatch.kserve.infer_response import check_outputs, decode_http_infer_response
from tritonwatch.kserve.payload import build_inputs, input_specs

client = client_for("http", "http://127.0.0.1:9", "grpc://127.0.0.1:9")
models = {
    "dense": {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}]},
    "text": {"inputs": [{"name": "t", "datatype": "BYTES", "shape": [-1, 1]}]},
}
for model, metadata in models.items():
    tensors = build_inputs(model, input_specs(model, metadata, {"max_batch_size": 8}), {})
    for binary in (True, False):
        assert client.encode_infer(model, "", tensors, binary=binary).startswith(b"POST /v2/models/")
header = b'{"outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}}]}'
check_outputs(decode_http_infer_response(header + bytes(8), len(header)), ["y"])
text = b'{"outputs":[{"name":"y","datatype":"BYTES","shape":[1,1],"data":["hi"]}]}'
check_outputs(decode_http_infer_response(text), ["y"])
import json
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.partition(".")[0] in FORBIDDEN),
                  "importers": importers}))
"""


def test_the_http_canary_path_imports_neither_numpy_nor_tritonclient() -> None:
    """Fails when importing the daemon, or building and checking HTTP canary requests for
    an FP32 and a BYTES model (binary and JSON tensors), loads numpy, ml_dtypes or any
    tritonclient module (16 MiB); the message names our modules that imported it."""
    script = _IMPORTER_SPY.format(forbidden=NOT_IN_THE_HTTP_CANARY) + _HTTP_CANARY
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["importers"] == {}, report
    assert report["loaded"] == []
