"""deploy/kubernetes without a cluster: both variants' manifests parse, wire together
(labels, selectors, ports, the generated ConfigMap), run the way the image expects, hold a
valid tritonwatch config, and carry the SLO rules `tritonwatch rules` makes of it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from support import REPO
from tritonwatch.commands.rules.generate import render_config_rules
from tritonwatch.config import load_config

pytestmark = pytest.mark.real

K8S = REPO / "deploy" / "kubernetes"
VARIANTS = {"daemonset": "DaemonSet", "deployment": "Deployment"}
PORT = 9849
Manifest = dict[str, Any]


def _documents(path: Path) -> list[Manifest]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def resources(variant: str) -> list[Manifest]:
    """What `kubectl apply -k` sends for ``variant``, read from the kustomizations
    (resources, recursively), before kustomize's generators and image rewrite."""

    def walk(folder: Path) -> list[Manifest]:
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        out: list[Manifest] = []
        for entry in kustomization["resources"]:
            path = (folder / entry).resolve()
            out += walk(path) if path.is_dir() else _documents(path)
        return out

    return walk(K8S / variant)


def kustomization(variant: str) -> Manifest:
    result: Manifest = yaml.safe_load((K8S / variant / "kustomization.yaml").read_text())
    return result


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def workload(variant: str) -> Manifest:
    return one(resources(variant), VARIANTS[variant])


def container(variant: str) -> Manifest:
    (only,) = workload(variant)["spec"]["template"]["spec"]["containers"]
    result: Manifest = only
    return result


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_manifest_parses_with_kind_and_metadata() -> None:
    """Breaks if a manifest fails to parse or lacks its kind, name or labels."""
    files = sorted(p for p in K8S.rglob("*.yaml") if p.name != "config.yaml")
    assert len(files) >= 10
    for path in files:
        for document in _documents(path):
            if path.name == "kustomization.yaml":
                assert document["kind"] == "Kustomization"
                continue
            assert document["apiVersion"] and document["kind"], path
            assert document["metadata"]["name"], path
            assert document["metadata"]["labels"], f"{path}: label everything"


@pytest.mark.parametrize("variant", VARIANTS)
def test_kustomization_files_exist_and_images_are_rewritten(variant: str) -> None:
    """Breaks if a kustomization names a missing file or does not rewrite the workload's image."""
    spec = kustomization(variant)
    for entry in spec["resources"]:
        assert (K8S / variant / entry).exists(), entry
    (generator,) = spec["configMapGenerator"]
    for file in generator["files"]:
        assert (K8S / variant / file).is_file()
    (image,) = spec["images"]
    assert container(variant)["image"] == image["name"]
    assert image["newTag"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_config_is_valid_and_listens_on_the_service_port(variant: str) -> None:
    """The ConfigMap's config.yaml passes the loader `tritonwatch check-config` runs."""
    config = load_config(K8S / variant / "config.yaml")
    assert config.exporter.listen == f"0.0.0.0:{PORT}"
    assert config.alerting.alertmanager_url


@pytest.mark.parametrize("variant", VARIANTS)
def test_workload_runs_the_image_as_it_expects(variant: str) -> None:
    """Non-root as the Dockerfile's user, config where the ConfigMap is mounted, exporter
    on the named port, /-/healthy for start-up, /-/ready for readiness, /health for
    liveness, restricted pod security."""
    pod = workload(variant)["spec"]["template"]["spec"]
    box = container(variant)
    user = re.search(r"^USER (\d+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert user is not None
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(user.group(1))
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert box["securityContext"]["allowPrivilegeEscalation"] is False
    assert box["securityContext"]["readOnlyRootFilesystem"] is True
    assert box["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False

    env = {e["name"]: e["value"] for e in box["env"]}
    (port,) = box["ports"]
    assert port == {"name": "metrics", "containerPort": PORT, "protocol": "TCP"}
    assert env["TRITONWATCH_LISTEN"] == f"0.0.0.0:{PORT}"
    probes = {
        "startupProbe": "/-/healthy",
        "readinessProbe": "/-/ready",
        "livenessProbe": "/health",
    }
    for probe, path in probes.items():
        assert box[probe]["httpGet"] == {"path": path, "port": "metrics"}

    assert box["args"][:2] == ["run", "--config"]
    config_path = Path(box["args"][2])
    (mount,) = [m for m in box["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    (generator,) = kustomization(variant)["configMapGenerator"]
    assert volume["configMap"]["name"] == generator["name"]
    assert config_path.name in generator["files"]
    assert "nvidia.com/gpu" not in str(box.get("resources")), "a monitor takes no GPU"


def test_daemonset_runs_on_gpu_nodes_with_nvml() -> None:
    """Breaks if the DaemonSet leaves GPU nodes, the nvidia runtime, or NVML."""
    pod = workload("daemonset")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in container("daemonset")["env"]}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert load_config(K8S / "daemonset" / "config.yaml").nvml.enabled in ("auto", True)


def test_daemonset_watches_the_triton_on_its_own_node() -> None:
    """Its target is a Service that only routes to the local node's Triton pod, and that
    Service serves the three ports the config derives from the target URL."""
    (target,) = load_config(K8S / "daemonset" / "config.yaml").targets
    service = one(resources("daemonset"), "Service", "triton-node-local")
    assert service["spec"]["internalTrafficPolicy"] == "Local"
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    ports = {p["port"] for p in service["spec"]["ports"]}
    for url in (
        target.effective_http_url,
        target.effective_grpc_url,
        target.effective_metrics_url,
    ):
        parts = urlsplit(url)
        assert parts.hostname == host
        assert parts.port in ports


def test_deployment_is_a_single_remote_watcher() -> None:
    """Breaks if the remote Deployment runs two replicas, rolls over, or asks for NVML."""
    spec = workload("deployment")["spec"]
    assert spec["replicas"] == 1, "a second replica doubles canary load and series"
    assert spec["strategy"]["type"] == "Recreate"
    assert "runtimeClassName" not in spec["template"]["spec"]
    assert load_config(K8S / "deployment" / "config.yaml").nvml.enabled is False


@pytest.mark.parametrize("variant", VARIANTS)
def test_selectors_service_and_servicemonitor_line_up(variant: str) -> None:
    """Breaks if selectors, Service, ServiceMonitor, account or namespace stop lining up."""
    manifests = resources(variant)
    work = workload(variant)
    pod_labels = work["spec"]["template"]["metadata"]["labels"]
    assert matches(work["spec"]["selector"]["matchLabels"], pod_labels)
    namespace = one(manifests, "Namespace")["metadata"]["name"]
    service = one(manifests, "Service", "tritonwatch")
    assert work["metadata"]["namespace"] == service["metadata"]["namespace"] == namespace
    assert matches(service["spec"]["selector"], pod_labels)
    (port,) = service["spec"]["ports"]
    assert port == {"name": "metrics", "port": PORT, "targetPort": "metrics", "protocol": "TCP"}

    monitor = one(manifests, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert namespace in monitor["spec"]["namespaceSelector"]["matchNames"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    assert endpoint["path"] == "/metrics"

    account = one(manifests, "ServiceAccount")
    assert work["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert not [m for m in manifests if m["kind"] in ("Role", "ClusterRole")], "no RBAC needed"
    labels = one(manifests, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("variant", VARIANTS)
def test_prometheusrule_wraps_the_generated_rules(variant: str, tmp_path: Path) -> None:
    """The same groups `tritonwatch rules` writes for the variant's config, and promtool
    accepts them."""
    rule = one(resources(variant), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    config = load_config(K8S / variant / "config.yaml")
    assert rule["spec"] == yaml.safe_load(render_config_rules(config))
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheusrule_files_are_up_to_date() -> None:
    """Breaks if a committed PrometheusRule differs from what render.py makes now."""
    checked = subprocess.run(
        [sys.executable, str(K8S / "render.py"), "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_daemonset_rules_are_the_rule_files_prometheus_loads() -> None:
    """Breaks if the DaemonSet's PrometheusRule (same target, model and SLOs as the compose
    stack) stops holding exactly the groups of deploy/prometheus/rules/, or those are gone."""
    files = sorted((REPO / "deploy" / "prometheus" / "rules").glob("*.yml"))
    assert [f.name for f in files] == ["tritonwatch-slo.rules.yml"]
    groups = [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]
    assert one(resources("daemonset"), "PrometheusRule")["spec"]["groups"] == groups


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("variant", VARIANTS)
def test_kubectl_kustomize_renders_the_variant(variant: str) -> None:
    """Where kubectl exists: kustomize builds the variant, names the ConfigMap by its hash
    and points the workload at it, and rewrites the image."""
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S / variant)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    manifests = [d for d in yaml.safe_load_all(built.stdout) if d]
    config_map = one(manifests, "ConfigMap")
    assert config_map["metadata"]["name"].startswith("tritonwatch-config-")
    config_text = config_map["data"]["config.yaml"]
    assert config_text == (K8S / variant / "config.yaml").read_text()
    work = one(manifests, VARIANTS[variant])
    pod = work["spec"]["template"]["spec"]
    names = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
    assert names == [config_map["metadata"]["name"]]
    image = kustomization(variant)["images"][0]
    assert pod["containers"][0]["image"] == f"{image['newName']}:{image['newTag']}"
