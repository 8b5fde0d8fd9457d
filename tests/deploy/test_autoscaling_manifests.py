"""deploy/kubernetes/autoscaling: the example HorizontalPodAutoscaler, prometheus-adapter
rule and KEDA ScaledObject, without a cluster.

* Schemas: the HPA and the adapter's ConfigMap with kubernetes-validate's strict schemas
  (as tests/deploy/test_kubernetes_schemas.py does the variants'); the ScaledObject with
  the openAPIV3Schema of KEDA's CRD vendored in tests/fixtures/keda/ (SOURCE.md says which
  release), its metadata with Kubernetes' ObjectMeta, and every field against the declared
  ones (an API server prunes an undeclared field of a structural schema silently); the
  adapter's config.yaml against the fields its loader reads strictly.
* Wiring: both autoscalers scale the same Deployment on the metric the daemon exports
  (``capacity_metrics.DESIRED``), selected by ``service`` and ``model`` as the deployment
  variant's config names them, with a target of 1 per replica.
* Queries: a real Prometheus scrapes the real collector's exposition with the labels the
  Prometheus Operator adds and the base ServiceMonitor's metricRelabelings, and the KEDA
  query and the adapter's rendered query answer the exported count.

Not checked: the CRD's CEL rule (min <= max is asserted by hand), a real API server, the
adapter or KEDA themselves.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
import threading
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from test_kubernetes import K8S, Manifest, one
from test_kubernetes_schemas import (
    dotted,
    kubernetes_errors,
    object_meta_validator,
    python_patterns,
    unknown_fields,
)

from support import fixtures_dir, free_port, http_get, wait_until
from tritonwatch.config import load_config
from tritonwatch.export.capacity_metrics import DESIRED, CapacityCollector
from tritonwatch.records.capacity_records import CapacityReading, DesiredReplicas

AUTOSCALING = K8S / "autoscaling"
KEDA_VERSION = "2.20.2"
KEDA_CRD = "keda.sh_scaledobjects.yaml"
SCALED_OBJECT = ("keda.sh/v1alpha1", "ScaledObject")
ADAPTER_FIELDS: dict[str, Any] = {
    "externalRules": {
        "seriesQuery": str,
        "seriesFilters": {"is": str, "isNot": str},
        "resources": {
            "template": str,
            "overrides": {"*": {"group": str, "resource": str}},
            "namespaced": bool,
        },
        "name": {"matches": str, "as": str},
        "metricsQuery": str,
    },
    "rules": list,
    "resourceRules": dict,
}
"""The yaml keys of prometheus-adapter's config (v0.12.0, pkg/config/config.go), which
its loader reads with yaml.UnmarshalStrict: an unknown key stops the adapter. Only
externalRules is spelled out; ``*`` stands for a map's free keys."""


def examples() -> list[Manifest]:
    return [
        doc
        for path in sorted(AUTOSCALING.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def example(kind: str) -> Manifest:
    return copy.deepcopy(one(examples(), kind))


@cache
def keda_schema() -> Manifest:
    """The openAPIV3Schema of the vendored CRD's one served version (v1alpha1)."""
    crd = yaml.safe_load((fixtures_dir() / "keda" / KEDA_CRD).read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["served"]]
    assert f"{crd['spec']['group']}/{served['name']}" == SCALED_OBJECT[0]
    assert crd["spec"]["names"]["kind"] == SCALED_OBJECT[1]
    schema: Manifest = python_patterns(served["schema"]["openAPIV3Schema"])
    return schema


@cache
def keda_validator() -> jsonschema.Draft202012Validator:
    # A structural CRD schema is JSON Schema; jsonschema ignores the x-kubernetes-* keys.
    return jsonschema.Draft202012Validator(keda_schema())


def keda_errors(obj: Manifest) -> list[str]:
    """What KEDA's CRD schema and ObjectMeta refuse in ``obj``, and its undeclared fields."""
    errors = [f"{dotted(e.absolute_path)}: {e.message}" for e in keda_validator().iter_errors(obj)]
    errors += [
        f"{dotted(('metadata', *e.absolute_path))}: {e.message}"
        for e in object_meta_validator().iter_errors(obj.get("metadata"))
    ]
    body = {key: value for key, value in obj.items() if key != "metadata"}
    errors += [
        f"{path}: field not declared by the CRD" for path in unknown_fields(body, keda_schema())
    ]
    return errors


def schema_errors(obj: Manifest) -> list[str]:
    if (obj["apiVersion"], obj["kind"]) == SCALED_OBJECT:
        return keda_errors(obj)
    return kubernetes_errors(obj)


def adapter_config(config_map: Manifest | None = None) -> Manifest:
    data = (config_map or example("ConfigMap"))["data"]
    assert list(data) == ["config.yaml"]
    config: Manifest = yaml.safe_load(data["config.yaml"])
    return config


def adapter_unknown_fields(value: Any, fields: Any = ADAPTER_FIELDS, path: str = "") -> list[str]:
    """The paths in ``value`` that the adapter's strict loader would refuse."""
    if isinstance(fields, type):
        return [] if isinstance(value, fields) else [f"{path}: not a {fields.__name__}"]
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out += adapter_unknown_fields(item, fields, f"{path}[{index}]")
        return out
    if not isinstance(value, dict):
        return [f"{path}: not a map"]
    out = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        declared = fields.get(key, fields.get("*"))
        out += (
            [f"{where}: unknown field"]
            if declared is None
            else adapter_unknown_fields(item, declared, where)
        )
    return out


def test_every_example_passes_its_schema() -> None:
    """Breaks if an example fails the Kubernetes schema of its kind, the ScaledObject
    fails KEDA's CRD schema or ObjectMeta or carries an undeclared field, the adapter's
    config carries a key its loader refuses, or the folder stops holding the three."""
    found = {f"{o['apiVersion']} {o['kind']}": schema_errors(o) for o in examples()}
    assert found == {
        "autoscaling/v2 HorizontalPodAutoscaler": [],
        "v1 ConfigMap": [],
        "keda.sh/v1alpha1 ScaledObject": [],
    }
    assert adapter_unknown_fields(adapter_config()) == []


def test_vendored_keda_crd_is_the_noted_release() -> None:
    """Breaks if the vendored CRD is not byte for byte the file SOURCE.md names (its git
    blob id), or its schema (Go patterns read as Python's) is not a valid JSON Schema."""
    source = (fixtures_dir() / "keda" / "SOURCE.md").read_text()
    content = (fixtures_dir() / "keda" / KEDA_CRD).read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    assert blob in source
    assert f"Version: {KEDA_VERSION}" in source
    assert f"config/crd/bases/{KEDA_CRD}" in source
    jsonschema.Draft202012Validator.check_schema(keda_schema())


def hpa_metric(hpa: Manifest) -> Manifest:
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    external: Manifest = metric["external"]
    return external


def hpa_selector() -> dict[str, str]:
    """The labels the HPA's External metric selects (service, model)."""
    metric = hpa_metric(example("HorizontalPodAutoscaler"))["metric"]
    labels: dict[str, str] = metric["selector"]["matchLabels"]
    return labels


def query_selector(query: str) -> tuple[str, str, dict[str, str]]:
    """(aggregation, metric name, label matchers) of ``agg(name{l="v",...})``."""
    match = re.fullmatch(r"(\w+)\((\w+)\{(.*)\}\)", query.strip())
    assert match, query
    labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(3)))
    assert match.group(3) == ",".join(f'{k}="{v}"' for k, v in labels.items())
    return match.group(1), match.group(2), labels


def test_hpa_sizes_a_deployment_to_the_exported_metric() -> None:
    """Breaks if the HPA stops scaling a Deployment on the External metric the daemon
    exports, selected by exactly service and model, at an average of 1 per replica (the
    replica count is then the metric), between 1 <= min <= max, or drops the scale-down
    stabilization window."""
    hpa = example("HorizontalPodAutoscaler")
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "triton",
    }
    metric = hpa_metric(hpa)
    assert metric["metric"]["name"] == DESIRED
    assert set(metric["metric"]["selector"]) == {"matchLabels"}
    assert set(metric["metric"]["selector"]["matchLabels"]) == {"service", "model"}
    assert metric["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert 1 <= spec["minReplicas"] <= spec["maxReplicas"]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_examples_select_what_the_deployment_variant_watches() -> None:
    """Breaks if the examples' Deployment, namespace, service or model stop being the
    Triton that deploy/kubernetes/deployment/config.yaml watches (its Service's host
    ``<name>.<namespace>.svc``; the service label is the target's service_name)."""
    config = load_config(K8S / "deployment" / "config.yaml")
    (target,) = config.targets
    name, namespace, *_ = (urlsplit(target.url).hostname or "").split(".")
    hpa, scaled = example("HorizontalPodAutoscaler"), example("ScaledObject")
    selector = hpa_selector()
    assert selector["service"] == target.service_name
    assert selector["model"] in [model.name for model in target.models]
    for obj in (hpa, scaled):
        assert obj["metadata"]["namespace"] == namespace
        assert obj["spec"]["scaleTargetRef"]["name"] == name


def test_keda_reads_the_same_metric_at_the_same_target() -> None:
    """Breaks if the ScaledObject stops scaling the HPA's Deployment within the same
    bounds on one Prometheus trigger whose query reads the exported metric with the HPA's
    service and model, AverageValue at threshold "1", an empty answer an error; or its
    min exceeds its max (the CRD's CEL rule, which jsonschema does not run)."""
    spec = example("ScaledObject")["spec"]
    hpa = example("HorizontalPodAutoscaler")["spec"]
    assert spec["scaleTargetRef"] == hpa["scaleTargetRef"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (
        hpa["minReplicas"],
        hpa["maxReplicas"],
    )
    assert spec["minReplicaCount"] <= spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "1"
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    assert urlsplit(trigger["metadata"]["serverAddress"]).scheme == "http"
    aggregation, name, labels = query_selector(trigger["metadata"]["query"])
    assert (aggregation, name) == ("max", DESIRED)
    assert labels == hpa_selector()
    keda_hpa = spec["advanced"]["horizontalPodAutoscalerConfig"]
    assert keda_hpa["behavior"]["scaleDown"] == hpa["behavior"]["scaleDown"]


def test_adapter_rule_serves_the_metric_the_hpa_names() -> None:
    """Breaks if the adapter's one external rule stops discovering the exported metric,
    naming it as the HPA asks, leaving the HPA's namespace out of the query (the series
    come from tritonwatch's namespace, the HPA sits in Triton's), or aggregating to one
    value."""
    (rule,) = adapter_config()["externalRules"]
    assert re.match(rf"{DESIRED}\{{", rule["seriesQuery"])
    assert re.fullmatch(rule["name"]["matches"], DESIRED)
    assert rule["name"]["as"] == hpa_metric(example("HorizontalPodAutoscaler"))["metric"]["name"]
    assert rule["resources"] == {"namespaced": False}
    assert example("HorizontalPodAutoscaler")["metadata"]["namespace"] != "tritonwatch"
    assert rule["metricsQuery"] == "max(<<.Series>>{<<.LabelMatchers>>})"


def rename(obj: Any, path: Sequence[str | int], old: str, new: str) -> None:
    for part in path:
        obj = obj[part]
    obj[new] = obj.pop(old)


def replace(obj: Any, path: Sequence[str | int], value: Any) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


METRIC = ("spec", "metrics", 0, "external")
TRIGGER = ("spec", "triggers", 0)
PLANTED: list[Any] = [
    pytest.param(
        "HorizontalPodAutoscaler",
        lambda o: rename(o, (*METRIC, "target"), "averageValue", "averagevalue"),
        "spec.metrics[0].external.target: Additional properties are not allowed",
        id="hpa-averagevalue",
    ),
    pytest.param(
        "HorizontalPodAutoscaler",
        lambda o: replace(o, ("spec", "minReplicas"), "1"),
        "spec.minReplicas: '1' is not of type",
        id="hpa-minreplicas-as-string",
    ),
    pytest.param(
        "ScaledObject",
        lambda o: replace(o, (*TRIGGER, "metadata", "threshold"), 1),
        "spec.triggers[0].metadata.threshold: 1 is not of type 'string'",
        id="keda-threshold-as-number",
    ),
    pytest.param(
        "ScaledObject",
        lambda o: rename(o, ("spec",), "minReplicaCount", "minReplicas"),
        "spec.minReplicas: field not declared by the CRD",
        id="keda-minreplicas",
    ),
    pytest.param(
        "ScaledObject",
        lambda o: replace(o, ("spec", "pollingInterval"), 0),
        "spec.pollingInterval: 0 is less than the minimum of 1",
        id="keda-polling-interval-zero",
    ),
    pytest.param(
        "ConfigMap",
        lambda o: replace(
            o,
            ("data", "config.yaml"),
            o["data"]["config.yaml"].replace("namespaced:", "namespace:"),
        ),
        "externalRules[0].resources.namespace: unknown field",
        id="adapter-namespace-for-namespaced",
    ),
]


@pytest.mark.parametrize(("kind", "plant", "expected"), PLANTED)
def test_a_planted_mistake_is_refused(
    kind: str, plant: Callable[[Manifest], None], expected: str
) -> None:
    """Breaks if the checks let a typo'd field, a wrong type or an out-of-range value in a
    copy of an example through, or refuse it for another reason than the planted one."""
    broken = example(kind)
    plant(broken)
    errors = schema_errors(broken)
    if kind == "ConfigMap":
        errors += adapter_unknown_fields(adapter_config(broken))
    assert len(errors) == 1, errors
    assert errors[0].startswith(expected), errors


class _Board:
    """The capacity board's two reads, holding fixed desired replicas."""

    def __init__(self, wanted: list[DesiredReplicas]) -> None:
        self.wanted = wanted

    def readings(self) -> Sequence[CapacityReading]:
        return []

    def replicas(self) -> Sequence[DesiredReplicas]:
        return self.wanted


@contextmanager
def served_exposition(wanted: list[DesiredReplicas]) -> Iterator[str]:
    """The real collector's /metrics on a loopback port; yields host:port."""
    registry = CollectorRegistry()
    registry.register(CapacityCollector(_Board(wanted), wall_clock=lambda: 0.0))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def operator_metric_relabel_configs(monitor: Manifest) -> list[Manifest]:
    """The ServiceMonitor endpoint's metricRelabelings as the Prometheus Operator writes
    them into Prometheus' config (pkg/prometheus/promcfg.go, generateRelabelConfig):
    snake_case keys, the action lower-cased."""
    keys = {
        "sourceLabels": "source_labels",
        "separator": "separator",
        "targetLabel": "target_label",
        "regex": "regex",
        "modulus": "modulus",
        "replacement": "replacement",
        "action": "action",
    }
    (endpoint,) = monitor["spec"]["endpoints"]
    out = []
    for relabeling in endpoint["metricRelabelings"]:
        assert set(relabeling) <= set(keys), relabeling
        config = {keys[key]: value for key, value in relabeling.items()}
        config["action"] = config.get("action", "replace").lower()
        out.append(config)
    return out


@contextmanager
def prometheus(config: Manifest, folder: Path) -> Iterator[Callable[[str], list[Manifest]]]:
    """A real Prometheus with ``config`` on a loopback port; yields its instant query."""
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    listen = f"127.0.0.1:{free_port()}"
    with (folder / "prometheus.log").open("w") as log:
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={folder / 'prometheus.yml'}",
                f"--web.listen-address={listen}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def query(expr: str) -> list[Manifest]:
            assert process.poll() is None, (folder / "prometheus.log").read_text()
            url = f"http://{listen}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
            status, body = http_get(url)
            reply = json.loads(body)
            assert status == 200 and reply["status"] == "success", body
            result: list[Manifest] = reply["data"]["result"]
            return result

        def ready() -> bool:
            assert process.poll() is None, (folder / "prometheus.log").read_text()
            try:
                return http_get(f"http://{listen}/-/ready", timeout=1)[0] == 200
            except urllib.error.URLError:
                return False

        try:
            wait_until(ready, 60, "Prometheus to be ready")
            yield query
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def adapter_query(rule: Manifest, selector: dict[str, str]) -> str:
    """The adapter's metricsQuery for an External metric request, rendered as
    BuildExternal renders it (pkg/naming/metrics_query.go): the series name, the
    request's selector as label matchers, no namespace (namespaced: false), no GroupBy."""
    matchers = ",".join(f'{label}="{value}"' for label, value in selector.items())
    query: str = rule["metricsQuery"]
    for field, value in (("Series", DESIRED), ("LabelMatchers", matchers), ("GroupBy", "")):
        query = query.replace(f"<<.{field}>>", value)
    assert "<<" not in query, query
    return query


@pytest.mark.real
def test_the_queries_answer_the_exported_count_through_the_operators_scrape(
    tmp_path: Path,
) -> None:
    """Breaks if, scraped as the Prometheus Operator scrapes the base ServiceMonitor (its
    target labels, service=tritonwatch among them, and the endpoint's metricRelabelings),
    the real collector's desired replicas stop answering the KEDA query with exactly one
    value (KEDA refuses several), the adapter's rendered query with the same, or its
    seriesQuery with the series; and shows the collision the relabelings undo."""
    monitor = one(
        list(yaml.safe_load_all((K8S / "base" / "servicemonitor.yaml").read_text())),
        "ServiceMonitor",
    )
    selector = hpa_selector()
    wanted = [
        DesiredReplicas(selector["service"], selector["model"], 3, 120.0, 50.0, ("a", "b")),
        DesiredReplicas(selector["service"], "other", 7, 300.0, 50.0, ("a",)),
        DesiredReplicas("elsewhere", selector["model"], 5, 200.0, 50.0, ("c",)),
    ]
    operator_labels = {
        "namespace": "tritonwatch",
        "service": "tritonwatch",
        "endpoint": "metrics",
        "pod": "tritonwatch-0",
        "container": "tritonwatch",
    }
    with served_exposition(wanted) as target:

        def job(name: str, relabel: list[Manifest]) -> Manifest:
            static = [{"targets": [target], "labels": operator_labels}]
            return {"job_name": name, "static_configs": static, "metric_relabel_configs": relabel}

        config = {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [
                job("tritonwatch", operator_metric_relabel_configs(monitor)),
                job("without-relabelings", []),
            ],
        }
        with prometheus(config, tmp_path) as query:
            # A scrape appends `up` with the scraped samples: both jobs' are in.
            wait_until(lambda: query("count(up == 1) == 2"), 60, "both jobs' first scrape")
            keda = example("ScaledObject")["spec"]["triggers"][0]["metadata"]["query"]
            assert [sample["value"][1] for sample in query(keda)] == ["3"]
            (rule,) = adapter_config()["externalRules"]
            assert [s["value"][1] for s in query(adapter_query(rule, selector))] == ["3"]
            found = query(f"count by (job) ({rule['seriesQuery']})")
            assert {s["metric"]["job"]: s["value"][1] for s in found} == {
                "tritonwatch": "3",
                "without-relabelings": "3",
            }
            bare = query(f'{DESIRED}{{job="without-relabelings",model="{selector["model"]}"}}')
            assert {(s["metric"]["service"], s["metric"]["exported_service"]) for s in bare} == {
                ("tritonwatch", selector["service"]),
                ("tritonwatch", "elsewhere"),
            }
            relabeled = query(f'{DESIRED}{{job="tritonwatch"}}')
            assert all("exported_service" not in s["metric"] for s in relabeled)
            assert {
                (s["metric"]["service"], s["metric"]["model"]): s["value"][1] for s in relabeled
            } == {(w.service, w.model): str(w.replicas) for w in wanted}
