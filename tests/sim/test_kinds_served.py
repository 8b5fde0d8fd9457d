"""The simulator serving an ensemble, a stateful model and a cache-enabled model.

The built-in kinds (``sim/builtin.py``: ``pipeline`` = ``prep`` → ``core`` → ``post``,
``seq``, ``cached``) run in process on virtual time with deterministic service times,
so every duration asserted is the cost model's own, exact on any host; statistics and
``/metrics`` are read back over HTTP as a client reads them. What real Triton 2.51 does
for the same requests is pinned in tests/sim/test_differential_real_triton.py.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonwatch.sim.builtin import BUILTIN_MODEL_SET, with_kind_models
from tritonwatch.sim.cache import BASE_BYTES, ENTRY_OVERHEAD_BYTES, ResponseCache
from tritonwatch.sim.core import SimCore
from tritonwatch.sim.errors import SimError
from tritonwatch.sim.models import ModelSet, parse_model_set
from tritonwatch.sim.scenarios import SCENARIOS
from tritonwatch.sim.sequences import SequenceFlags
from tritonwatch.sim.server import Simulator
from tritonwatch.sim.tensors import RequestInput
from tritonwatch.sim.testing import DETERMINISTIC_TIMING, scrape

pytestmark = pytest.mark.sim

NEVER_S = 3600.0
CACHE_BYTES = 1 << 20
EXACT = {**DETERMINISTIC_TIMING, "compute_infer_per_item": 0}


def kinds_model_set(**timing_ms: float) -> ModelSet:
    """The built-in kinds (and the three plain models), each with a deterministic
    ``compute_infer`` of ``timing_ms[name]`` (1 ms unless given) and no other stage."""
    data = with_kind_models(BUILTIN_MODEL_SET)
    models = [
        {**model, "timing": {**EXACT, "compute_infer": f"{timing_ms.get(model['name'], 1)}ms"}}
        for model in data["models"]
    ]
    return parse_model_set({**data, "models": models})


@pytest.fixture
def kinds(start_sim: Callable[..., Simulator]) -> Simulator:
    """prep 1 ms, core 4 ms (behind its 20 ms batching delay), post 0.5 ms, seq 2 ms,
    cached 15 ms; a 1 MiB response cache; virtual time."""
    return start_sim(
        models=kinds_model_set(prep=1, core=4, post=0.5, seq=2, cached=15),
        clock="virtual",
        metrics_interval_s=NEVER_S,
        response_cache_bytes=CACHE_BYTES,
    )


def fp32(value: float = 0.5, rows: int = 1) -> list[RequestInput]:
    array = np.full((rows, 16), value, dtype=np.float32)
    return [RequestInput("INPUT0", "FP32", (rows, 16), array=array)]


async def infer(
    core: SimCore, model: str, value: float = 0.5, rows: int = 1, **flags: Any
) -> dict[str, Any]:
    outcome = await core.repository.infer(
        model, "", fp32(value, rows), sequence=SequenceFlags(**flags)
    )
    return outcome.outputs


def stats(sim: Simulator, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    try:
        result: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    return result


def counts(entry: dict[str, Any]) -> dict[str, int]:
    inference = entry["inference_stats"]
    return {
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
        **{stage: inference[stage]["count"] for stage in inference},
    }


# -- ensembles ---------------------------------------------------------------------------------


def test_ensemble_counts_one_request_and_sums_its_steps_compute(kinds: Simulator) -> None:
    """One pipeline request: each step counts one request; the ensemble's compute is the
    sum of its steps', its queue holds none of core's 20 ms wait, which its request
    duration does hold."""

    async def one(core: SimCore) -> dict[str, Any]:
        return await infer(core, "pipeline", value=0.25)

    outputs = kinds.run_async(one)
    np.testing.assert_array_equal(outputs["OUTPUT0"], np.full((1, 16), 0.25, np.float32))
    ensemble = stats(kinds, "pipeline")
    steps = {name: stats(kinds, name) for name in ("prep", "core", "post")}
    assert counts(ensemble) == {
        "inference_count": 1,
        "execution_count": 1,
        "success": 1,
        "fail": 0,
        "queue": 1,
        "compute_input": 1,
        "compute_infer": 1,
        "compute_output": 1,
        "cache_hit": 0,
        "cache_miss": 0,
    }
    for entry in steps.values():
        assert (entry["inference_count"], entry["inference_stats"]["success"]["count"]) == (1, 1)
    infer_ns = {name: e["inference_stats"]["compute_infer"]["ns"] for name, e in steps.items()}
    nominal = {"prep": 1_000_000, "core": 4_000_000, "post": 500_000}
    assert infer_ns == {name: pytest.approx(ns, abs=2) for name, ns in nominal.items()}
    assert ensemble["inference_stats"]["compute_infer"]["ns"] == sum(infer_ns.values())
    assert ensemble["inference_stats"]["queue"]["ns"] == 0
    core_queue = steps["core"]["inference_stats"]["queue"]["ns"]
    assert core_queue == pytest.approx(20_000_000, abs=1_000)  # its batcher's delay
    request_ns = ensemble["inference_stats"]["success"]["ns"]
    assert request_ns == pytest.approx(sum(infer_ns.values()) + core_queue, abs=1_000)
    assert ensemble["batch_stats"][0]["batch_size"] == 1


def test_ensemble_metrics_and_config(kinds: Simulator) -> None:
    """/metrics: the ensemble's series move like its statistics and it is never pending;
    the config prints Triton's ensemble block with the chained maps filled in."""

    async def two(core: SimCore) -> None:
        await asyncio.gather(infer(core, "pipeline"), infer(core, "pipeline", rows=2))

    kinds.run_async(two)
    metrics = scrape(kinds)
    assert metrics.model("nv_inference_request_success", "pipeline") == 2
    assert metrics.model("nv_inference_count", "pipeline") == 3
    assert metrics.model("nv_inference_exec_count", "pipeline") == 2
    assert metrics.model("nv_inference_pending_request_count", "pipeline") == 0
    assert metrics.model("nv_inference_queue_duration_us", "pipeline") == 0
    assert metrics.model("nv_inference_count", "core") == 3
    client = httpclient.InferenceServerClient(kinds.http_url.removeprefix("http://"))
    config = client.get_model_config("pipeline")
    client.close()
    assert (config["platform"], config["backend"], config["instance_group"]) == (
        "ensemble",
        "",
        [],
    )
    assert "optimization" not in config
    assert config["model_transaction_policy"] == {"decoupled": False}
    assert config["ensemble_scheduling"]["step"] == [
        {
            "model_name": "prep",
            "model_version": -1,
            "input_map": {"INPUT0": "INPUT0"},
            "output_map": {"OUTPUT0": "prep_0_OUTPUT0"},
            "model_namespace": "",
        },
        {
            "model_name": "core",
            "model_version": -1,
            "input_map": {"INPUT0": "prep_0_OUTPUT0"},
            "output_map": {"OUTPUT0": "core_1_OUTPUT0"},
            "model_namespace": "",
        },
        {
            "model_name": "post",
            "model_version": -1,
            "input_map": {"INPUT0": "core_1_OUTPUT0"},
            "output_map": {"OUTPUT0": "OUTPUT0"},
            "model_namespace": "",
        },
    ]


def test_a_failing_step_fails_the_ensemble_as_triton_counts_it(kinds: Simulator) -> None:
    """A backend failure in ``core``: the client gets core's error prefixed with the
    ensemble's name (500); core counts a BACKEND failure, the ensemble two OTHER ones
    (as real Triton 2.51 counts one failed ensemble request); post never runs."""
    kinds.inject_fault(kind="error_burst", reason="BACKEND", fraction=1.0, model="core")
    client = httpclient.InferenceServerClient(kinds.http_url.removeprefix("http://"))
    tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("pipeline", [tensor])
    client.close()
    assert caught.value.status() == "500"
    assert caught.value.message() == ("in ensemble 'pipeline', simulated backend failure in 'core'")
    metrics = scrape(kinds)

    def failures(model: str, reason: str) -> float:
        return metrics.value(
            "nv_inference_request_failure", model=model, reason=reason, version="1"
        )

    assert (failures("pipeline", "OTHER"), failures("core", "BACKEND")) == (2, 1)
    assert metrics.model("nv_inference_request_success", "pipeline") == 0
    assert metrics.model("nv_inference_request_success", "prep") == 1
    assert metrics.model("nv_inference_request_success", "post") == 0


def test_ensemble_answers_carry_the_sequence_parameters(kinds: Simulator) -> None:
    """HTTP and gRPC answers of an ensemble echo sequence_id/start/end (0/false by
    default); a plain model's carry no parameters."""
    http = httpclient.InferenceServerClient(kinds.http_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(kinds.grpc_url)
    try:
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((1, 16), np.float32), binary_data=False)
        answer = http.infer("pipeline", inputs, sequence_id="s-1", sequence_start=True)
        plain = http.infer("prep", inputs)
        grpc_inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32")]
        grpc_inputs[0].set_data_from_numpy(np.ones((1, 16), np.float32))
        grpc_answer = grpc.infer("pipeline", grpc_inputs, sequence_id=9, sequence_end=True)
    finally:
        http.close()
        grpc.close()
    assert answer.get_response()["parameters"] == {
        "sequence_id": "s-1",
        "sequence_start": True,
        "sequence_end": False,
    }
    assert "parameters" not in plain.get_response()
    parameters = grpc_answer.get_response().parameters
    assert (parameters["sequence_id"].int64_param, parameters["sequence_end"].bool_param) == (
        9,
        True,
    )


# -- stateful models --------------------------------------------------------------------------

REFUSED = {
    "no id": (
        {},
        "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
    ),
    "no START": (
        {"id": 42},
        "inference request for sequence 42 to model 'seq' must specify "
        "the START flag on the first request of the sequence",
    ),
    "string id, no START": (
        {"id": "a"},
        "inference request for sequence a to model 'seq' "
        "must specify the START flag on the first request "
        "of the sequence",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_sequence_refusals_count_nowhere(kinds: Simulator, case: str) -> None:
    """A request without a correlation id, or of a sequence never started: refused with
    Triton's INVALID_ARG text before anything counts."""
    flags, message = REFUSED[case]

    async def refused(core: SimCore) -> SimError:
        with pytest.raises(SimError) as caught:
            await infer(core, "seq", **flags)
        return caught.value

    error = kinds.run_async(refused)
    assert (error.code.http_status, error.message) == (400, message)
    assert counts(stats(kinds, "seq"))["success"] + counts(stats(kinds, "seq"))["fail"] == 0


def test_a_sequence_runs_start_to_end_then_needs_start_again(kinds: Simulator) -> None:
    """START, a middle request, END succeed; after END the id is closed again; a batch
    of 2 is refused whatever the flags."""

    async def sequence(core: SimCore) -> list[str]:
        await infer(core, "seq", id=7, start=True)
        await infer(core, "seq", id=7)
        await infer(core, "seq", id=7, end=True)
        messages = []
        for flags, rows in (({"id": 7}, 1), ({"id": 8, "start": True}, 2)):
            try:
                await infer(core, "seq", rows=rows, **flags)
            except SimError as error:
                messages.append(error.message)
        return messages

    messages = kinds.run_async(sequence)
    assert messages == [
        "inference request for sequence 7 to model 'seq' must specify the START flag on the "
        "first request of the sequence",
        "inference request to model 'seq' must specify batch-size 1 due to requirements of "
        "sequence batcher",
    ]
    assert counts(stats(kinds, "seq"))["success"] == 3


def test_an_idle_sequence_is_released(kinds: Simulator) -> None:
    """A sequence idle longer than max_sequence_idle_microseconds (1 s by default) is
    released: its next request without START is refused; within the idle time it runs."""

    async def idle(core: SimCore) -> str:
        await infer(core, "seq", id=5, start=True)
        await asyncio.sleep(0.9)  # virtual time
        await infer(core, "seq", id=5)
        await asyncio.sleep(1.1)
        with pytest.raises(SimError) as caught:
            await infer(core, "seq", id=5)
        return caught.value.message

    assert kinds.run_async(idle).startswith("inference request for sequence 5 ")


def test_a_start_waits_for_a_free_slot(start_sim: Callable[..., Simulator]) -> None:
    """max_batch_size 1 and one instance: one slot. A second sequence's START waits (as
    queue time) until the first sequence ends; then it runs."""
    data = with_kind_models(BUILTIN_MODEL_SET)
    for model in data["models"]:
        if model["name"] == "seq":
            model.update(max_batch_size=1, timing={**EXACT, "compute_infer": "2ms"})
    sim = start_sim(models=parse_model_set(data), clock="virtual", metrics_interval_s=NEVER_S)

    async def two_sequences(core: SimCore) -> float:
        loop = asyncio.get_running_loop()
        await infer(core, "seq", id=1, start=True)
        started = loop.time()
        second = asyncio.ensure_future(infer(core, "seq", id=2, start=True, end=True))
        await asyncio.sleep(0.05)
        assert not second.done()
        assert core.repository.pending("seq") == 1  # waiting for the slot
        await infer(core, "seq", id=1, end=True)
        await second
        return loop.time() - started

    assert sim.run_async(two_sequences) == pytest.approx(0.054, abs=1e-6)
    entry = stats(sim, "seq")
    assert entry["inference_stats"]["queue"]["ns"] == pytest.approx(52_000_000, abs=10)  # slot wait


def test_sequence_config_prints_as_triton(kinds: Simulator) -> None:
    """sequence_batching with the idle default, the direct block and every control."""
    client = httpclient.InferenceServerClient(kinds.http_url.removeprefix("http://"))
    config = client.get_model_config("seq")
    client.close()
    block = config["sequence_batching"]
    assert block["direct"] == {"max_queue_delay_microseconds": 0, "minimum_slot_utilization": 0}
    assert block["max_sequence_idle_microseconds"] == 1_000_000
    assert [c["name"] for c in block["control_input"]] == ["START", "END", "CORRID"]
    assert block["control_input"][2]["control"] == [
        {
            "kind": "CONTROL_SEQUENCE_CORRID",
            "int32_false_true": [],
            "fp32_false_true": [],
            "bool_false_true": [],
            "data_type": "TYPE_UINT64",
        }
    ]
    assert "dynamic_batching" not in config


@pytest.mark.parametrize(
    ("parameters", "status", "message"),
    [
        (
            {"sequence_id": -3},
            500,
            "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
        ),
        (
            {"sequence_id": 3, "sequence_start": 1},
            500,
            "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean",
        ),
    ],
)
def test_mistyped_http_sequence_parameters(
    kinds: Simulator, parameters: dict[str, Any], status: int, message: str
) -> None:
    """HTTP sequence parameters of the wrong JSON type: Triton's parse errors (500)."""
    body = {
        "parameters": parameters,
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}],
    }
    request = urllib.request.Request(
        kinds.http_url + "/v2/models/seq/infer", data=json.dumps(body).encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    with caught.value as error:
        assert (error.code, json.loads(error.read())) == (status, {"error": message})


# -- response cache -----------------------------------------------------------------------------


def test_a_repeated_request_hits_the_cache(kinds: Simulator) -> None:
    """The second identical request is answered from the cache: no execution, no
    inference, no compute; both are successes; a different input misses again."""

    async def three(core: SimCore) -> list[float]:
        loop = asyncio.get_running_loop()
        took = []
        for value in (1.0, 1.0, 2.0):
            started = loop.time()
            outputs = await infer(core, "cached", value=value)
            assert float(outputs["OUTPUT0"][0, 0]) == value
            took.append(loop.time() - started)
        return took

    took = kinds.run_async(three)
    assert took == [pytest.approx(0.015, abs=1e-6), 0.0, pytest.approx(0.015, abs=1e-6)]
    entry = counts(stats(kinds, "cached"))
    assert entry == {
        "inference_count": 2,
        "execution_count": 2,
        "success": 3,
        "fail": 0,
        "queue": 3,
        "compute_input": 2,
        "compute_infer": 2,
        "compute_output": 2,
        "cache_hit": 1,
        "cache_miss": 2,
    }
    kinds.call(lambda core: core.poll())
    metrics = scrape(kinds)
    assert metrics.model("nv_cache_num_hits_per_model", "cached") == 1
    assert metrics.model("nv_cache_num_misses_per_model", "cached") == 2
    assert metrics.model("nv_inference_exec_count", "cached") == 2
    assert metrics.model("nv_inference_request_success", "cached") == 3
    assert (metrics.value("nv_cache_num_entries"), metrics.value("nv_cache_num_lookups")) == (2, 3)
    assert metrics.types["nv_cache_num_hits_per_model"] == "counter"
    assert metrics.types["nv_cache_util"] == "gauge"
    assert 0 < metrics.value("nv_cache_util") < 1
    # only the cache-enabled model has per-model cache series
    assert not any(
        name == "nv_cache_num_hits_per_model" and ("model", "core") in labels
        for name, labels in metrics.values
    )


def test_the_key_is_model_version_input_names_and_bytes(kinds: Simulator) -> None:
    """Same bytes over gRPC (raw) and HTTP (JSON), with another request id: one entry."""
    http = httpclient.InferenceServerClient(kinds.http_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(kinds.grpc_url)
    try:
        array = np.arange(16, dtype=np.float32).reshape(1, 16)
        tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(array, binary_data=False)
        http.infer("cached", [tensor], request_id="one")
        grpc_tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        grpc_tensor.set_data_from_numpy(array)
        answer = grpc.infer("cached", [grpc_tensor], request_id="two")
    finally:
        http.close()
        grpc.close()
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), array)
    entry = counts(stats(kinds, "cached"))
    assert (entry["cache_miss"], entry["cache_hit"], entry["execution_count"]) == (1, 1, 1)


def test_without_a_server_cache_every_request_executes(
    start_sim: Callable[..., Simulator],
) -> None:
    """response_cache on the model but no server cache: nothing is cached, yet the
    per-model cache families are printed (at zero) and the server-wide ones are not."""
    sim = start_sim(models=kinds_model_set(), clock="virtual", metrics_interval_s=NEVER_S)

    async def twice(core: SimCore) -> None:
        await infer(core, "cached")
        await infer(core, "cached")

    sim.run_async(twice)
    entry = counts(stats(sim, "cached"))
    assert (entry["execution_count"], entry["cache_hit"], entry["cache_miss"]) == (2, 0, 0)
    metrics = scrape(sim)
    assert metrics.model("nv_cache_num_hits_per_model", "cached") == 0
    assert "nv_cache_util" not in metrics.types


def test_cache_evicts_the_least_recently_used() -> None:
    """A cache with room for two entries: a third evicts the oldest; a hit refreshes."""
    entry = ENTRY_OVERHEAD_BYTES + 64
    cache = ResponseCache(BASE_BYTES + 2 * entry)
    out = {"OUTPUT0": np.zeros((1, 16), np.float32)}
    for key in (b"a", b"b"):
        cache.insert(key, out)
    assert cache.lookup(b"a", 64)[0] is not None  # a is now the newest
    cache.insert(b"c", out)
    assert [cache.lookup(key, 64)[0] is not None for key in (b"a", b"b", b"c")] == [
        True,
        False,
        True,
    ]
    reading = cache.reading()
    assert (reading.entries, reading.evictions, reading.hits, reading.misses) == (2, 1, 3, 1)


def test_every_scenario_applies_to_the_kinds(start_sim: Callable[..., Simulator]) -> None:
    """A scenario set on every model leaves an ensemble its steps and a stateful model
    its sequence batcher (their batching is their own block), and they keep serving."""
    sim = start_sim(models=kinds_model_set(), clock="virtual", metrics_interval_s=NEVER_S)
    for name in SCENARIOS:
        sim.set_scenario(name)

        async def both(core: SimCore) -> None:
            await infer(core, "pipeline")
            await infer(core, "seq", id=3, start=True, end=True)

        sim.run_async(both)
        states = {m["name"]: m for m in sim.state()["models"]}
        assert states["seq"]["max_queue_delay_microseconds"] is None, name
        assert states["pipeline"]["instance_count"] == 1, name


def test_more_instances_give_more_sequence_slots(start_sim: Callable[..., Simulator]) -> None:
    """A count-only config load (applied in place) resizes the slots: max_batch_size 1 and
    two instances hold two sequences at once, where one instance held one."""
    data = with_kind_models(BUILTIN_MODEL_SET)
    for model in data["models"]:
        if model["name"] == "seq":
            model.update(max_batch_size=1)
    sim = start_sim(models=parse_model_set(data), clock="virtual", metrics_interval_s=NEVER_S)
    client = httpclient.InferenceServerClient(sim.http_url.removeprefix("http://"))
    config = client.get_model_config("seq")
    config["instance_group"][0]["count"] = 2
    client.load_model("seq", config=json.dumps(config))
    client.close()

    async def two_open(core: SimCore) -> int:
        await infer(core, "seq", id=1, start=True)
        await infer(core, "seq", id=2, start=True)  # would wait for a slot with one
        sequences = core.repository.runtime("seq").sequences
        assert sequences is not None
        return sequences.open_sequences

    assert sim.run_async(two_open) == 2
