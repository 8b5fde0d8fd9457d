"""The sweep: its knee and budget stop on recorded steps; against the simulator its
perf_analyzer CSV, JSON, plot, CLI and load engines (the live knee: test_sweep_bench.py)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import time
from array import array
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import tritonwatch.sweep.load_sweep as sweep_module
import tritonwatch.sweep.worker as worker_module
from sim_process import SimProcess
from support import TRITONWATCH, assert_within_smoke_bound, fixtures_dir, free_port, wait_until
from sweep_support import TWO_INSTANCES, judged, quantiles
from tritonwatch.analysis.sweep_verdict import judge_sweep
from tritonwatch.commands.cli import build_parser
from tritonwatch.commands.sweep_cli import parse_levels, settings_from
from tritonwatch.commands.tune.cli import sweep_settings_from
from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.config import parse_config
from tritonwatch.export.sweep_report import render_svg, to_csv, to_json
from tritonwatch.kserve.payload import Tensor, TensorSpec, build_inputs
from tritonwatch.records.sweep_records import LoadMode, ServerBreakdown, StepResult, SweepSettings
from tritonwatch.sim.testing import model_set_with
from tritonwatch.sweep.grpc_callbacks import CallbackGrpcLoad
from tritonwatch.sweep.h2 import h2_request
from tritonwatch.sweep.load_sweep import SweepRunner, _step_result
from tritonwatch.sweep.pool import cut_all, split_concurrency, start_workers, stop_workers
from tritonwatch.sweep.schedule import sweep_plans
from tritonwatch.sweep.spec import LoadSpec, grpc_load_spec, http_load_spec
from tritonwatch.sweep.stability import WindowResult
from tritonwatch.sweep.worker import WindowSamples, uses_library

pytestmark = pytest.mark.real


PERF_ANALYZER_CSV_HEADERS: dict[str, str] = json.loads(
    (fixtures_dir() / "perf_analyzer_csv_header.json").read_text()
)["headers"]
"""The first line of the real perf_analyzer's ``-f`` CSV per mode, as it wrote it."""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(models=model_set_with(simple=TWO_INSTANCES)) as process:
        yield process


@pytest.mark.parametrize(
    ("text", "integers", "levels"),
    [
        ("1,2,4,8", True, (1, 2, 4, 8)),
        ("1:64", True, (1, 2, 4, 8, 16, 32, 64)),
        ("1:48", True, (1, 2, 4, 8, 16, 32, 48)),
        ("2:10:4", True, (2, 6, 10)),
        ("50:200:50", False, (50, 100, 150, 200)),
    ],
)
def test_levels(text: str, integers: bool, levels: tuple[float, ...]) -> None:
    """Level lists and ranges parse as perf_analyzer's: doubling, stepped, end included."""
    assert parse_levels(text, integers=integers) == levels


@pytest.mark.parametrize("text", ["", "a,b", "0,1", "1:2:3:4", "4:1:0"])
def test_bad_levels_are_refused(text: str) -> None:
    """Empty, non-numeric, zero, four-part or backward level specs are refused."""
    with pytest.raises(Exception, match=r"must be|positive"):
        parse_levels(text, integers=True)


def _recorded_step(level: float, rate: float, p95: float) -> StepResult:
    """A step as the runner measures one: ``rate`` inferences/s at ``p95`` seconds."""
    latencies = tuple([p95 / 2] * 90 + [p95] * 10)
    return StepResult(
        level=level, requests_per_second=rate, inferences_per_second=rate,
        latency=quantiles(p95), requests=int(rate * 3), errors=0, error_rate=0.0,
        stable=True, windows=3, processes=1, client_cpu_per_request=1e-4,
        client_latency_share=0.02, generator_utilisation=0.3, generator_bound=False,
        server=ServerBreakdown(int(rate * 3), p95 / 2, {"queue": p95 / 4, "compute_infer": 0.004},
                               1.0),
        window_throughputs=(rate, rate, rate), latency_samples=latencies,
    )  # fmt: skip


TWO_INSTANCES_STEPS = {
    1: _recorded_step(1, 236.0, 0.0046),
    2: _recorded_step(2, 451.0, 0.0049),
    4: _recorded_step(4, 472.0, 0.0093),
    8: _recorded_step(8, 478.0, 0.0181),
    16: _recorded_step(16, 481.0, 0.0352),
    32: _recorded_step(32, 483.0, 0.0690),
}
"""What a sweep of :data:`TWO_INSTANCES` (ceiling 2 / 4 ms = 500/s) measures: the rise
stops at 2 in flight, after which only the queue (and so the p95) grows."""


class RecordedSweep(SweepRunner):
    """A :class:`SweepRunner` whose steps are :data:`TWO_INSTANCES_STEPS` (or ``steps``):
    what ``run`` does with them (which levels it runs, where it stops) is under test."""

    def __init__(self, settings: SweepSettings, steps: dict[int, StepResult]) -> None:
        super().__init__(settings)
        self.steps = steps
        self.ran: list[float] = []

    def _step(self, tensors: list[Tensor], batch: int, level: float, **_: object) -> StepResult:
        self.ran.append(level)
        return self.steps[int(level)]


class _NoStats:
    def __init__(self, *_: object) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> type[RecordedSweep]:
    """:class:`RecordedSweep`, with no server to ask for tensors or statistics."""
    monkeypatch.setattr(sweep_module, "prepare_tensors", lambda settings: ([], 1))
    monkeypatch.setattr(sweep_module, "StatsReader", _NoStats)
    return RecordedSweep


def test_the_knee_is_where_throughput_flattens(recorded: type[RecordedSweep]) -> None:
    """Breaks if the sweep's verdict misplaces the knee of a curve that flattens after 2
    in flight (or calls it unreached), drops a level or its server stages, or finds a
    knee on a curve that is still rising."""
    settings = SweepSettings(url="http://127.0.0.1:1", model="simple", levels=(1, 2, 4, 8, 16))
    runner = recorded(settings, TWO_INSTANCES_STEPS)
    result = judge_sweep(runner.run())
    assert runner.ran == [1, 2, 4, 8, 16]
    assert [s.level for s in result.steps] == [1, 2, 4, 8, 16]
    assert result.knee is not None
    assert (result.knee.concurrency, result.knee.reached) == (2, True)
    assert result.steps[-1].server == TWO_INSTANCES_STEPS[16].server
    assert result.warnings == ()
    rising = {level: _recorded_step(level, 236.0 * level, 0.0046) for level in (1, 2, 4, 8)}
    still_rising = judge_sweep(recorded(replace(settings, levels=(1, 2, 4, 8)), rising).run())
    assert still_rising.knee is not None
    assert (still_rising.knee.concurrency, still_rising.knee.reached) == (8, False)


def test_sweep_stops_at_the_budget_and_reports_its_operating_point(
    recorded: type[RecordedSweep],
) -> None:
    """Breaks if the sweep runs past the first step over the p95 budget, or reports an
    operating point outside it (or not the lowest level within 2 % of the best)."""
    settings = SweepSettings(
        url="grpc://127.0.0.1:1", protocol="grpc", model="simple",
        levels=(1, 2, 4, 8, 16, 32), window_seconds=0.5, budget_p95=0.025,
    )  # fmt: skip
    runner = recorded(settings, TWO_INSTANCES_STEPS)
    result = judge_sweep(runner.run())
    assert runner.ran == [1, 2, 4, 8, 16]  # 16 is over the budget: 32 never runs
    assert result.stopped_at_budget
    assert result.operating_point is TWO_INSTANCES_STEPS[4]  # 472/s; 8's 478 is within 2 %
    data = to_json(result)
    assert set(data) == {
        "settings",
        "steps",
        "knee",
        "judged_on",
        "operating_point",
        "stopped_at_budget",
        "warnings",
    }
    assert data["stopped_at_budget"] is True
    assert data["judged_on"] == "judged on inferences/s and p95 latency"
    assert len(data["steps"]) == len(result.steps)
    assert {
        "level",
        "inferences_per_second",
        "latency",
        "server",
        "stable",
        "client_cpu_per_request",
    } <= set(data["steps"][0])
    json.dumps(data)  # serialisable as is


def test_cli_writes_perf_analyzer_csv_json_and_plot(sim: SimProcess, tmp_path: Path) -> None:
    """Breaks if `tritonwatch sweep` stops writing perf_analyzer's CSV (header, level
    order, µs), the JSON steps or the plot's budget, knee and operating-point marks."""
    out_csv, out_json, out_svg = tmp_path / "p.csv", tmp_path / "p.json", tmp_path / "p.svg"
    result = subprocess.run(
        [TRITONWATCH, "sweep", "--url", sim.http_url, "--model", "simple", "--concurrency", "1,4",
         "--measurement-interval", "250ms", "--budget-p95", "50ms",
         "--csv", str(out_csv), "--json", str(out_json), "--plot", str(out_svg)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "operating point: " in result.stdout
    rows = list(csv.reader(io.StringIO(out_csv.read_text())))
    assert rows[0] == PERF_ANALYZER_CSV_HEADERS["concurrency"].split(",")
    assert [row[0] for row in rows[1:]] == ["1", "4"]  # sorted by increasing inferences/s
    compute_infer_us = int(rows[1][6])  # the simulator's own time: 4000 µs or, loaded, more
    assert compute_infer_us >= 3900
    assert_within_smoke_bound(compute_infer_us / 1e6, 0.004, "the CSV's compute infer")
    assert len(json.loads(out_json.read_text())["steps"]) == 2
    svg = out_svg.read_text()
    assert svg.startswith("<svg") and 'class="budget"' in svg and 'class="knee"' in svg
    assert 'class="operating-point"' in svg


def test_client_saturation_is_flagged_and_the_knee_called_a_lower_bound() -> None:
    """A worker whose CPU time nearly equals the wall time was the bottleneck itself."""
    busy = WindowSamples(array("d", [0.001] * 900), cpu_seconds=0.95, wall_seconds=1.0)
    idle = WindowSamples(array("d", [0.001] * 500), cpu_seconds=0.10, wall_seconds=1.0)
    windows = [WindowResult(900, 0.001)] * 3
    saturated = _step_result(8, 1, [busy] * 3, windows, processes=1, percentile=95, server=None)
    relaxed = _step_result(4, 1, [idle] * 3, windows, processes=1, percentile=95, server=None)
    assert saturated.generator_bound
    assert saturated.generator_utilisation == pytest.approx(0.95)
    assert saturated.client_cpu_per_request == pytest.approx(0.95 / 900)
    assert not relaxed.generator_bound
    settings = SweepSettings(url="http://127.0.0.1:1", model="m", levels=(4, 8))
    result = judged(settings, [relaxed, saturated], False, [])
    assert any("lower bound" in warning for warning in result.warnings)


@pytest.mark.parametrize("mode", ["concurrency", "rate"])
def test_csv_header_is_perf_analyzers(mode: LoadMode) -> None:
    """Breaks if our CSV's header drifts from the one the real perf_analyzer writes in
    this mode (captured from the binary; tests/triton re-checks the capture)."""
    settings = SweepSettings(url="http://127.0.0.1:1", model="m", levels=(1,), mode=mode)
    text = to_csv(judged(settings, [], False, []))
    assert text.splitlines() == [PERF_ANALYZER_CSV_HEADERS[mode]]
    assert render_svg(judged(settings, [], False, [])).startswith("<svg")


def test_split_and_exact_merge() -> None:
    """Concurrency splits evenly over workers and their windows merge exactly."""
    assert split_concurrency(10, 3) == [4, 3, 3]
    assert split_concurrency(2, 8) == [1, 1]
    a = WindowSamples(array("d", [1.0, 2.0]), errors=1, cpu_seconds=0.5, wall_seconds=2.0)
    b = WindowSamples(array("d", [3.0]), timeouts=2, cpu_seconds=0.25, wall_seconds=1.5)
    merged = a.merge(b)
    assert list(merged.latencies) == [1.0, 2.0, 3.0]
    assert (merged.errors, merged.timeouts, merged.cpu_seconds, merged.wall_seconds, merged.workers) == (
        1, 2, 0.75, 2.0, 2,
    )  # fmt: skip


def test_two_worker_processes_share_the_load(sim: SimProcess) -> None:
    """Two worker processes share the load and their windows come back as one."""
    tensors = build_inputs(
        "simple",
        [TensorSpec("INPUT0", "INT32", (1, 16)), TensorSpec("INPUT1", "INT32", (1, 16))],
        {},
    )
    spec = http_load_spec(sim.http_url, "simple", "", tensors, mode="concurrency", concurrency=4)
    workers = start_workers(spec, processes=2)
    try:
        time.sleep(0.5)
        cut_all(workers)
        time.sleep(1.0)
        window = cut_all(workers)
    finally:
        stop_workers(workers)
    assert window.workers == 2
    assert len(window.latencies) > 20  # about 500/s: dozens even on a starved host
    assert window.errors == 0
    assert window.cpu_seconds > 0


def _simple_tensors() -> list[Tensor]:
    return build_inputs(
        "simple",
        [TensorSpec("INPUT0", "INT32", (1, 16)), TensorSpec("INPUT1", "INT32", (1, 16))],
        {},
    )


@pytest.mark.parametrize(
    ("engine", "mode", "concurrency"),
    [("h2", "concurrency", 1), ("h2", "concurrency", 8), ("h2", "rate", 4),
     ("library", "concurrency", 1), ("library", "concurrency", 8), ("library", "rate", 4)],
)  # fmt: skip
def test_grpc_load_measures_on_both_paths(
    sim: SimProcess, engine: str, mode: LoadMode, concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Breaks if a gRPC load path (the wire code's HTTP/2; grpc's callbacks for what it
    cannot send), closed or open loop, stops keeping requests in flight, recording
    them or handing windows over."""
    if engine == "library":  # as a request over 64 KiB would
        monkeypatch.setattr(worker_module, "h2_request", lambda spec: None)
    spec = grpc_load_spec(f"grpc://{sim.grpc_url}", "simple", "", _simple_tensors(),
                          mode=mode, concurrency=concurrency, rate=100.0)  # fmt: skip
    assert uses_library(spec) is (engine == "library")
    workers = start_workers(spec, processes=1)
    try:
        time.sleep(0.3)
        cut_all(workers)
        time.sleep(1.0)
        window = cut_all(workers)
    finally:
        stop_workers(workers)
    # 4 ms per request, two instances: about 250/s at concurrency 1 (100/s open loop),
    # so even a starved host records dozens in the second; none faster than the model.
    assert len(window.latencies) > 20
    assert (window.errors, window.timeouts) == (0, 0)
    assert min(window.latencies) >= 0.004
    assert window.wall_seconds > 0.9  # the second between the cuts, at least
    assert_within_smoke_bound(window.wall_seconds, 1.0, "a one-second window")


def test_grpc_goes_to_the_library_only_when_the_wire_code_cannot_send_it() -> None:
    """Breaks if gRPC the wire code can send (in clear or over TLS, either loop) goes
    through grpc, or a request over a fresh connection's window does not."""
    plain = LoadSpec("grpc", "127.0.0.1", 1, b"x", "concurrency", 1)
    tls = replace(plain, tls=ClientTLS())
    for spec in (plain, tls, replace(tls, mode="rate", rate=10.0), replace(tls, concurrency=64)):
        assert h2_request(spec) is not None
        assert not uses_library(spec)
    for big in (replace(plain, payload=bytes(70_000)), replace(tls, payload=bytes(70_000))):
        assert h2_request(big) is None
        assert uses_library(big)
    assert not uses_library(replace(plain, protocol="http", payload=bytes(70_000)))


def test_callback_grpc_load_counts_failures_and_stops() -> None:
    """Breaks if a failed callback request is lost or raised instead of counted, if the
    chain stops after a failure, or if stop hangs."""
    spec = LoadSpec("grpc", "127.0.0.1", free_port(), b"", "concurrency", 2, timeout=1.0)
    failures: list[bool] = []
    load = CallbackGrpcLoad(spec, lambda latency, timed_out: failures.append(latency is None))
    load.start()
    try:
        wait_until(lambda: len(failures) >= 4, 10.0, "failures recorded and retried")
    finally:
        started = time.monotonic()
        load.stop(timeout=5.0)
        stopped_in = time.monotonic() - started
    assert all(failures)
    assert_within_smoke_bound(stopped_in, 1.0, "stopping the callback load")


def test_a_step_stopped_before_its_first_window_reports_nothing_measured() -> None:
    """A step stopped before its first window reports zeros and unstable, not a crash."""
    step = _step_result(4, 1, [], [], processes=1, percentile=95, server=None)
    assert (step.requests, step.errors, step.stable, step.inferences_per_second) == (
        0,
        0,
        False,
        0.0,
    )
    assert step.p95 == 0.0


def test_string_flags_reach_the_sweep_settings() -> None:
    """Breaks if sweep's --string-length/--string-data stop reaching SweepSettings."""
    base = ["sweep", "--url", "grpc://127.0.0.1:1", "--model", "text"]
    default = settings_from(build_parser().parse_args(base))
    assert (default.string_length, default.string_data) == (128, None)
    given = settings_from(
        build_parser().parse_args([*base, "--string-length", "7", "--string-data", "hi there"])
    )
    assert (given.string_length, given.string_data) == (7, "hi there")


def test_string_flags_come_from_the_environment_for_sweep_and_tune(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Breaks if TRITONWATCH_STRING_LENGTH/_DATA stop setting the flags of sweep and tune."""
    monkeypatch.setenv("TRITONWATCH_STRING_LENGTH", "12")
    monkeypatch.setenv("TRITONWATCH_STRING_DATA", "from the environment")
    sweep = settings_from(
        build_parser().parse_args(["sweep", "--url", "http://127.0.0.1:1", "--model", "m"])
    )
    tune = sweep_settings_from(
        build_parser().parse_args(
            ["tune", "--url", "http://127.0.0.1:1", "--model", "m", "--budget-p95", "50ms"]
        )
    )
    for settings in (sweep, tune):
        assert (settings.string_length, settings.string_data) == (12, "from the environment")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--string-length", "0"], "--string-length: must be between 1 and 1048576, got: '0'"),
        (["--string-length", "lots"], "--string-length: must be an integer, got: 'lots'"),
        (["--string-data", ""], "--string-data: must not be empty (leave it out for random"),
    ],
)
def test_bad_string_flags_are_refused_with_exit_2(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Breaks if a bad --string-length/--string-data is accepted or its message loses the value."""
    for command in (["sweep"], ["tune", "--budget-p95", "50ms"]):
        with pytest.raises(SystemExit) as caught:
            build_parser().parse_args(
                [*command, "--url", "http://127.0.0.1:1", "--model", "m", *flags]
            )
        assert caught.value.code == 2
        assert message in capsys.readouterr().err


def test_scheduled_sweeps_fill_bytes_inputs_as_the_models_canary() -> None:
    """Breaks if the daemon's scheduled sweep ignores the model's canary string settings."""
    config = parse_config(
        "sweep: {enabled: true}\ncanary: {string_length: 9}\n"
        "targets: [{name: lab, url: 'grpc://127.0.0.1:1', models: [{name: text,"
        " canary: {string_data: hello}}, {name: other}]}]",
        "s.yaml",
    )
    text, other = (plan.settings for plan in sweep_plans(config))
    assert (text.string_length, text.string_data) == (9, "hello")
    assert (other.string_length, other.string_data) == (9, None)


def test_scheduled_sweeps_skip_openai_canaries() -> None:
    """Breaks if the daemon sweeps an OpenAI server's model over a KServe v2 API it lacks."""
    config = parse_config(
        "sweep: {enabled: true}\n"
        "targets: [{name: v, url: 'http://127.0.0.1:1', openai_url: 'http://127.0.0.1:1',"
        " models: [{name: llama, canary: {protocol: openai}}, {name: plain}]}]",
        "s.yaml",
    )
    assert [plan.settings.model for plan in sweep_plans(config)] == ["plain"]


def test_cli_reports_an_unreachable_server_in_one_line() -> None:
    """Breaks if `tritonwatch sweep` against a port where nothing listens ends in a
    traceback instead of one line naming the server and the model, with exit status 1."""
    url = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [TRITONWATCH, "sweep", "--url", url, "--model", "simple", "--concurrency", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"sweep: cannot ask {url} about simple:" in result.stdout
