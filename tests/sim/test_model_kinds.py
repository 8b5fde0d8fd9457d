"""Model-set blocks of ensembles, stateful and cached models: validation, config, parsing.

Pure functions: no simulator runs here (unit tests).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tritonwatch.sim.builtin import BUILTIN_MODEL_SET, with_kind_models
from tritonwatch.sim.cache import cache_key, parse_cache_config
from tritonwatch.sim.errors import SimError
from tritonwatch.sim.model_config import (
    build_config,
    config_to_json,
    parse_override,
    spec_from_config,
)
from tritonwatch.sim.model_kinds import resolve_steps
from tritonwatch.sim.models import ModelSetError, parse_model_set
from tritonwatch.sim.sequence_params import grpc_sequence_flags, http_sequence_flags
from tritonwatch.sim.sequences import SequenceFlags

KINDS = with_kind_models(BUILTIN_MODEL_SET)


def kinds_with(name: str, **changes: Any) -> dict[str, Any]:
    """The kind models' data with ``name``'s top-level fields changed (None removes)."""
    data = copy.deepcopy(KINDS)
    for model in data["models"]:
        if model["name"] == name:
            model.update(changes)
            for key in [k for k, v in changes.items() if v is None]:
                del model[key]
    return data


def test_the_short_ensemble_form_makes_a_cpu_ensemble_with_chained_steps() -> None:
    """``ensemble: [names]``: platform ensemble, no backend, no GPU; the first step reads
    the ensemble's inputs, the last writes its outputs."""
    model_set = parse_model_set(KINDS)
    pipeline = model_set.model("pipeline")
    assert pipeline is not None
    assert (pipeline.platform, pipeline.backend, pipeline.instance_group.kind) == (
        "ensemble",
        "",
        "KIND_CPU",
    )
    steps = resolve_steps(pipeline, model_set.model)
    assert [(s.model, dict(s.inputs), dict(s.outputs)) for s in steps] == [
        ("prep", {"INPUT0": "INPUT0"}, {"OUTPUT0": "prep_0_OUTPUT0"}),
        ("core", {"INPUT0": "prep_0_OUTPUT0"}, {"OUTPUT0": "core_1_OUTPUT0"}),
        ("post", {"INPUT0": "core_1_OUTPUT0"}, {"OUTPUT0": "OUTPUT0"}),
    ]


CORRID_WITHOUT_TYPE = {"name": "C", "kind": "CONTROL_SEQUENCE_CORRID"}


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("pipeline", {"ensemble": ["prep", "nope"]}, "step 1 names no other model"),
        (
            "pipeline",
            {"ensemble": [{"model_name": "prep", "input_map": {"INPUT0": "missing"}}]},
            "reads 'missing', which nothing wrote",
        ),
        (
            "pipeline",
            {"ensemble": [{"model_name": "prep", "output_map": {"OUTPUT0": "elsewhere"}}]},
            "no step writes the ensemble output(s) ['OUTPUT0']",
        ),
        (
            "pipeline",
            {"input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]}]},
            "input 'INPUT0' is TYPE_FP32, but 'INPUT0' is TYPE_INT32",
        ),
        ("pipeline", {"response_cache": True}, "response_cache is simulated for plain"),
        ("pipeline", {"max_batch_size": 16}, "allows batches of 16, but step 0 (prep) only 8"),
        (
            "seq",
            {"sequence_batching": {"direct": {}, "oldest": {}}},
            "takes direct or oldest, not both",
        ),
        (
            "seq",
            {"sequence_batching": {"control_input": [CORRID_WITHOUT_TYPE]}},
            "a CORRID control takes a data_type",
        ),
        (
            "seq",
            {"dynamic_batching": {"max_queue_delay_microseconds": 100}},
            "a model takes one of ['sequence_batching', 'dynamic_batching'], not several",
        ),
    ],
)
def test_mistakes_are_named(name: str, changes: dict[str, Any], message: str) -> None:
    """Each mistake fails the model set with the model and what is wrong."""
    with pytest.raises(ModelSetError) as caught:
        parse_model_set(kinds_with(name, **changes))
    assert message in str(caught.value)


def test_ensembles_must_not_nest_in_a_cycle() -> None:
    data = copy.deepcopy(KINDS)
    data["models"].append({**data["models"][-3], "name": "outer", "ensemble": ["pipeline"]})
    parse_model_set(data)  # an ensemble of an ensemble is fine
    for model in data["models"]:
        if model["name"] == "pipeline":
            model["ensemble"] = ["prep", "outer"]
    with pytest.raises(ModelSetError, match="cycle: pipeline -> outer -> pipeline"):
        parse_model_set(data)


def test_response_cache_takes_triton_s_block_too() -> None:
    model_set = parse_model_set(kinds_with("cached", response_cache={"enable": True}))
    cached = model_set.model("cached")
    assert cached is not None and cached.response_cache


@pytest.mark.parametrize("name", ["pipeline", "seq", "cached"])
def test_a_printed_config_loads_back_to_the_same_model(name: str) -> None:
    """GET config → load it as the override → the same spec and the same config."""
    model_set = parse_model_set(KINDS)
    spec = model_set.model(name)
    assert spec is not None
    steps = resolve_steps(spec, model_set.model) if spec.is_ensemble else None
    printed = config_to_json(build_config(spec, steps))
    loaded = spec_from_config(spec, parse_override(name, json.dumps(printed)))
    assert config_to_json(build_config(loaded, steps)) == printed
    assert loaded.batch_rule == spec.batch_rule
    assert (loaded.sequence_batching is None) == (spec.sequence_batching is None)
    assert loaded.response_cache == spec.response_cache


def test_normalisation_fills_sequence_defaults_as_triton() -> None:
    """An override with ``oldest`` and no idle time gets 1 s and [max_batch_size]."""
    override = {
        "name": "seq",
        "backend": "python",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        "sequence_batching": {"oldest": {}},
    }
    printed = config_to_json(parse_override("seq", json.dumps(override)))
    assert printed["sequence_batching"]["max_sequence_idle_microseconds"] == 1_000_000
    assert printed["sequence_batching"]["oldest"]["preferred_batch_size"] == [4]


def test_cache_config_is_triton_s_local_cache() -> None:
    assert parse_cache_config("local,size=1048576") == 1_048_576
    for bad in ("redis,size=10", "local", "local,size=-1", "local,size=1MiB"):
        with pytest.raises(ValueError, match="cache"):
            parse_cache_config(bad)


def test_cache_key_is_model_version_and_named_bytes() -> None:
    """Names and bytes, in name order; not the order the request lists them in."""
    a, b = np.zeros(4, np.float32), np.ones(4, np.float32)
    key = cache_key("m", "1", {"A": a, "B": b})
    assert key == cache_key("m", "1", {"B": b, "A": a})
    others = {cache_key("m", "2", {"A": a, "B": b}), cache_key("m", "1", {"A": b, "B": a})}
    assert len({key, *others}) == 3


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({}, SequenceFlags()),
        ({"sequence_id": 7, "sequence_start": True}, SequenceFlags(7, True, False)),
        ({"sequence_id": "abc", "sequence_end": True}, SequenceFlags("abc", False, True)),
    ],
)
def test_http_sequence_parameters(parameters: dict[str, Any], expected: SequenceFlags) -> None:
    assert http_sequence_flags(parameters) == expected


ID_ERROR = "Unable to parse 'sequence_id': attempt to access JSON"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"sequence_id": -1}, f"{ID_ERROR} non-string as string"),
        ({"sequence_id": True}, f"{ID_ERROR} non-string as string"),
        (
            {"sequence_end": "yes"},
            "Unable to parse 'sequence_end': attempt to access JSON non-boolean as boolean",
        ),
    ],
)
def test_mistyped_http_sequence_parameters_are_internal(
    parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(SimError) as caught:
        http_sequence_flags(parameters)
    assert (caught.value.code.http_status, caught.value.message) == (500, message)


def test_grpc_sequence_parameters() -> None:
    """int64 ids read as unsigned, string ids as they are; other types are refused."""
    request = service_pb2.ModelInferRequest()
    request.parameters["sequence_id"].int64_param = -4
    request.parameters["sequence_start"].bool_param = True
    assert grpc_sequence_flags(request.parameters) == SequenceFlags(2**64 - 4, True, False)
    request.parameters["sequence_id"].uint64_param = 4
    with pytest.raises(SimError, match=r"expected int64_param or string_param\.$"):
        grpc_sequence_flags(request.parameters)
    request.parameters["sequence_id"].string_param = "s"
    request.parameters["sequence_end"].string_param = "true"
    with pytest.raises(SimError, match=r"'sequence_end' parameter, expected bool_param\.$"):
        grpc_sequence_flags(request.parameters)
