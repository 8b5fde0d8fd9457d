"""deploy/kubernetes against the schemas an API server applies, without a cluster.

Every object `kubectl apply -k` sends for a variant — the base's, the variant's own, and
the ConfigMap kustomize's configMapGenerator makes of config.yaml, built here as kustomize
builds it — is validated:

* built-in kinds with kubernetes-validate's strict schemas for one pinned Kubernetes
  version (strict: an unknown field such as ``imagePullPolcy`` is an error, as kubectl's
  default server-side field validation makes it);
* the Prometheus Operator's kinds (ServiceMonitor, PrometheusRule) with the
  openAPIV3Schema of the CRDs vendored in tests/fixtures/prometheus-operator/ (SOURCE.md
  says which release), their metadata with Kubernetes' ObjectMeta. The CRD schemas leave
  ``additionalProperties`` open, and an API server silently prunes a field a structural
  schema does not declare: so every field is also checked against the declared ones, and
  a typo such as ``intervall`` fails here instead of vanishing in the cluster.

The checks are proven to bite by planting typos in copies of the real objects. Not
checked: CEL rules (x-kubernetes-validations), list-map key uniqueness, formats.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource
from test_kubernetes import K8S, VARIANTS, Manifest, kustomization, one, resources

from support import fixtures_dir

pytestmark = pytest.mark.unit

KUBERNETES_VERSION = "1.37.0"
"""The newest minor kubernetes-validate 1.37.0 ships schemas for (its package data holds
kubernetes-json-schema/v1.25.0-local … v1.37.0-local[-strict]). Raise it with the package."""

CRD_FILES = (
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
OPERATOR_VERSION = "0.93.0"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
EMULATED_KUSTOMIZE_FIELDS = {"apiVersion", "kind", "resources", "configMapGenerator", "images"}
"""What `applied_objects` builds as kustomize would; any other field (namespace,
labels, patches, generatorOptions, …) fails the tests until it is emulated too."""


def crd_dir() -> Path:
    return fixtures_dir() / "prometheus-operator"


def python_patterns(schema: Any) -> Any:
    """``schema`` with its Go (RE2) patterns in Python's syntax: RE2 takes flags anywhere
    (``^(?i)(abort|warn)?$``), Python's re only at the start, where they mean the same."""
    if isinstance(schema, list):
        return [python_patterns(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: python_patterns(value) for key, value in schema.items()}
    if isinstance(out.get("pattern"), str):
        out["pattern"] = re.sub(r"^\^\(\?([ims]+)\)", r"(?\1)^", out["pattern"])
    return out


@cache
def crd_schemas() -> dict[tuple[str, str], Manifest]:
    """(apiVersion, kind) -> the openAPIV3Schema of each served version of the vendored CRDs."""
    out: dict[tuple[str, str], Manifest] = {}
    for name in CRD_FILES:
        crd = yaml.safe_load((crd_dir() / name).read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = python_patterns(version["schema"]["openAPIV3Schema"])
                out[(f"{group}/{version['name']}", kind)] = schema
    return out


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    # OpenAPI v3 as a structural CRD schema uses it is JSON Schema; jsonschema ignores the
    # x-kubernetes-* keys, which are annotations for the API server.
    return jsonschema.Draft202012Validator(crd_schemas()[(api_version, kind)])


@cache
def object_meta_validator() -> jsonschema.Draft202012Validator:
    """Kubernetes' ObjectMeta from the pinned version's strict definitions: what the API
    server holds a custom object's metadata to (the CRD schemas say only ``type: object``)."""
    folder = files("kubernetes_validate") / "kubernetes-json-schema"
    definitions = json.loads(
        (folder / f"v{KUBERNETES_VERSION}-local-strict" / "_definitions.json").read_text()
    )
    registry: Registry[Any] = Registry().with_resource(
        definitions["$id"], Resource.from_contents(definitions)
    )
    ref = {"$ref": f"{definitions['$id']}#/$defs/{OBJECT_META}"}
    return jsonschema.Draft202012Validator(ref, registry=registry)


def dotted(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def unknown_fields(value: Any, schema: Manifest, path: tuple[str | int, ...] = ()) -> Iterator[str]:
    """The paths of ``value``'s fields that ``schema`` does not declare, recursively: the
    fields an API server would prune from a custom object."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        declared = schema.get("properties", {})
        rest = schema.get("additionalProperties", False)
        for key, item in value.items():
            if key in declared:
                yield from unknown_fields(item, declared[key], (*path, key))
            elif isinstance(rest, dict):
                yield from unknown_fields(item, rest, (*path, key))
            elif rest is not True:
                yield dotted((*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from unknown_fields(item, schema["items"], (*path, index))


def crd_errors(obj: Manifest) -> list[str]:
    schema = crd_schemas()[(obj["apiVersion"], obj["kind"])]
    validator = crd_validator(obj["apiVersion"], obj["kind"])
    errors = [f"{dotted(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    errors += [
        f"{dotted(('metadata', *e.absolute_path))}: {e.message}"
        for e in object_meta_validator().iter_errors(obj.get("metadata"))
    ]
    body = {key: value for key, value in obj.items() if key != "metadata"}
    errors += [f"{path}: field not declared by the CRD" for path in unknown_fields(body, schema)]
    return errors


def kubernetes_errors(obj: Manifest) -> list[str]:
    try:
        used = kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{dotted(error.path)}: {error.message}"]
    assert used == KUBERNETES_VERSION.rsplit(".", 1)[0], f"validated against {used}"
    return []


def check_of(obj: Manifest) -> str | None:
    """Which check holds ``obj`` to a schema: "crd", "kubernetes", or None for neither."""
    if (obj["apiVersion"], obj["kind"]) in crd_schemas():
        return "crd"
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return None
    except kubernetes_validate.ValidationError:
        pass
    return "kubernetes"


def schema_errors(obj: Manifest) -> list[str]:
    """What the schema of ``obj``'s kind refuses in it; fails for a kind neither check knows."""
    check = check_of(obj)
    assert check is not None, f"no schema for {obj['apiVersion']} {obj['kind']}"
    return crd_errors(obj) if check == "crd" else kubernetes_errors(obj)


def generated_config_maps(variant: str) -> list[Manifest]:
    """The ConfigMaps the variant's configMapGenerator makes, as kustomize makes them:
    the generator's name (less the content-hash suffix, which no schema looks at) and
    namespace, data keyed by file name (or the ``key=`` before a file, or a literal's)."""
    out = []
    for generator in kustomization(variant).get("configMapGenerator", []):
        unsupported = set(generator) - {"name", "namespace", "files", "literals"}
        assert not unsupported, f"build {sorted(unsupported)} here as kustomize does"
        data = {}
        for entry in generator.get("files", []):
            key, _, path = entry.rpartition("=")
            data[key or Path(path).name] = (K8S / variant / path).read_text()
        for entry in generator.get("literals", []):
            key, _, value = entry.partition("=")
            data[key] = value
        metadata = {"name": generator["name"]}
        if "namespace" in generator:
            metadata["namespace"] = generator["namespace"]
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    return out


def rewrite_images(obj: Manifest, images: list[Manifest]) -> None:
    """kustomize's ``images`` field: a container image named ``name`` becomes
    ``newName:newTag`` (or ``newName@digest``)."""
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    for box in pod.get("containers", []) + pod.get("initContainers", []):
        for image in images:
            if box["image"].split("@")[0].rsplit(":", 1)[0] != image["name"]:
                continue
            name = image.get("newName", image["name"])
            if "digest" in image:
                box["image"] = f"{name}@{image['digest']}"
            else:
                tag = image.get("newTag", box["image"].partition(":")[2] or None)
                box["image"] = f"{name}:{tag}" if tag else name


def applied_objects(variant: str) -> list[Manifest]:
    """Every object `kubectl apply -k deploy/kubernetes/<variant>` sends."""
    for folder in (K8S / variant, K8S / "base"):
        spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
        extra = set(spec) - EMULATED_KUSTOMIZE_FIELDS
        assert not extra, f"{folder.name}: emulate {sorted(extra)} in applied_objects"
    objects = resources(variant)
    for obj in objects:
        rewrite_images(obj, kustomization(variant).get("images", []))
    return objects + generated_config_maps(variant)


def name_of(obj: Manifest) -> str:
    metadata = obj["metadata"]
    return f"{obj['kind']} {metadata.get('namespace', '')}/{metadata['name']}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_passes_its_schema(variant: str) -> None:
    """Breaks if an object the variant applies (base objects and the generated ConfigMap
    included) fails the Kubernetes schema of its kind, or a ServiceMonitor or
    PrometheusRule fails its CRD's schema, ObjectMeta, or carries an undeclared field."""
    failures = {name_of(obj): schema_errors(obj) for obj in applied_objects(variant)}
    assert {name: errors for name, errors in failures.items() if errors} == {}


def test_every_object_kind_is_covered_by_a_check() -> None:
    """Breaks if an object of either variant would be validated by neither check, or the
    objects read stop including the kinds kustomize sends (the ConfigMap among them)."""
    checks: dict[str, set[str | None]] = {}
    for variant in VARIANTS:
        for obj in applied_objects(variant):
            checks.setdefault(f"{obj['apiVersion']} {obj['kind']}", set()).add(check_of(obj))
    uncovered = [kind for kind, found in checks.items() if None in found]
    assert uncovered == []
    assert checks == {
        "v1 Namespace": {"kubernetes"},
        "v1 ServiceAccount": {"kubernetes"},
        "v1 Service": {"kubernetes"},
        "v1 ConfigMap": {"kubernetes"},
        "apps/v1 DaemonSet": {"kubernetes"},
        "apps/v1 Deployment": {"kubernetes"},
        "monitoring.coreos.com/v1 ServiceMonitor": {"crd"},
        "monitoring.coreos.com/v1 PrometheusRule": {"crd"},
    }


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_config_map_is_the_one_the_workload_mounts(variant: str) -> None:
    """Breaks if the ConfigMap built here stops being the one the workload mounts, in its
    namespace, holding config.yaml verbatim."""
    objects = applied_objects(variant)
    config_map = one(objects, "ConfigMap")
    work = one(objects, VARIANTS[variant])
    pod = work["spec"]["template"]["spec"]
    assert [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v] == [
        config_map["metadata"]["name"]
    ]
    assert config_map["metadata"]["namespace"] == work["metadata"]["namespace"]
    assert config_map["data"] == {"config.yaml": (K8S / variant / "config.yaml").read_text()}
    image = kustomization(variant)["images"][0]
    assert pod["containers"][0]["image"] == f"{image['newName']}:{image['newTag']}"


def test_vendored_crds_are_the_noted_release() -> None:
    """Breaks if a vendored CRD is not byte for byte the file of the Prometheus Operator
    release SOURCE.md names (its git blob id), or its schema (Go patterns read as
    Python's) is not a valid JSON Schema."""
    source = (crd_dir() / "SOURCE.md").read_text()
    assert f"Version: {OPERATOR_VERSION}" in source
    for name in CRD_FILES:
        content = (crd_dir() / name).read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
        assert blob in source, f"{name}: git blob {blob} is not the one SOURCE.md notes"
        crd = yaml.safe_load(content)
        assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == OPERATOR_VERSION
        assert f"example/prometheus-operator-crd/{name}" in source
    assert {key[0] for key in crd_schemas()} == {"monitoring.coreos.com/v1"}
    for schema in crd_schemas().values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_what_the_crds_allow_passes() -> None:
    """Breaks if the CRD checks refuse what the API server accepts: an integer ``expr``
    (int-or-string), a case-insensitive Go pattern, a map's free keys, a relabeling's
    optional fields."""
    rule = one(applied_objects("deployment"), "PrometheusRule")
    rule["spec"]["groups"][0]["partial_response_strategy"] = "Warn"
    rule["spec"]["groups"][0]["rules"][0]["expr"] = 1
    rule["spec"]["groups"][0]["rules"][0].setdefault("labels", {})["any_label"] = "x"
    monitor = one(applied_objects("deployment"), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["relabelings"][0]["regex"] = "(.*)"
    assert schema_errors(rule) == []
    assert schema_errors(monitor) == []


def rename(obj: Manifest, path: tuple[str | int, ...], old: str, new: str) -> None:
    parent: Any = obj
    for part in path:
        parent = parent[part]
    parent[new] = parent.pop(old)


def replace(obj: Manifest, path: tuple[str | int, ...], value: Any) -> None:
    parent: Any = obj
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value


CONTAINER = ("spec", "template", "spec", "containers", 0)
RULE = ("spec", "groups", 0, "rules", 0)
PLANTED: list[Any] = [
    pytest.param(
        "ServiceMonitor",
        lambda o: rename(o, ("spec", "endpoints", 0), "interval", "intervall"),
        "spec.endpoints[0].intervall: field not declared",
        id="servicemonitor-endpoint-intervall",
    ),
    pytest.param(
        "ServiceMonitor",
        lambda o: rename(o, ("metadata",), "labels", "lables"),
        "metadata: Additional properties are not allowed ('lables' was unexpected)",
        id="servicemonitor-metadata-lables",
    ),
    pytest.param(
        "ServiceMonitor",
        lambda o: replace(o, ("spec", "endpoints", 0, "interval"), "15 seconds"),
        "spec.endpoints[0].interval: '15 seconds' does not match",
        id="servicemonitor-interval-not-a-duration",
    ),
    pytest.param(
        "PrometheusRule",
        lambda o: replace(o, (*RULE, "expr"), ["up == 0"]),
        "spec.groups[0].rules[0].expr: ['up == 0'] is not valid",
        id="prometheusrule-expr-as-list",
    ),
    pytest.param(
        "PrometheusRule",
        lambda o: rename(o, RULE, "record", "recrod"),
        "spec.groups[0].rules[0].recrod: field not declared",
        id="prometheusrule-rule-recrod",
    ),
    pytest.param(
        "PrometheusRule",
        lambda o: replace(o, ("spec", "groups", 0, "partial_response_strategy"), "retry"),
        "spec.groups[0].partial_response_strategy: 'retry' does not match",
        id="prometheusrule-partial-response-strategy-go-regex",
    ),
    pytest.param(
        "Deployment",
        lambda o: rename(o, CONTAINER, "imagePullPolicy", "imagePullPolcy"),
        "spec.template.spec.containers[0]: Additional properties are not allowed "
        "('imagePullPolcy' was unexpected)",
        id="deployment-container-imagePullPolcy",
    ),
    pytest.param(
        "Deployment",
        lambda o: replace(o, ("spec", "replicas"), "1"),
        "spec.replicas: '1' is not of type",
        id="deployment-replicas-as-string",
    ),
    pytest.param(
        "Service",
        lambda o: replace(o, ("spec", "ports", 0, "port"), "metrics"),
        "spec.ports[0].port: 'metrics' is not of type",
        id="service-port-by-name",
    ),
    pytest.param(
        "ConfigMap",
        lambda o: replace(o, ("data",), {"config.yaml": {"targets": []}}),
        "data.config.yaml: {'targets': []} is not of type",
        id="configmap-data-not-a-string",
    ),
]


@pytest.mark.parametrize(("kind", "plant", "expected"), PLANTED)
def test_a_planted_mistake_is_refused(
    kind: str, plant: Callable[[Manifest], None], expected: str
) -> None:
    """Breaks if the checks let a typo'd field, a wrong type or a malformed value in a copy
    of a real object through, or refuse it for another reason than the planted one."""
    original = one(applied_objects("deployment"), kind)
    assert schema_errors(original) == []
    broken = copy.deepcopy(original)
    plant(broken)
    errors = schema_errors(broken)
    assert len(errors) == 1, errors
    assert errors[0].startswith(expected), errors
